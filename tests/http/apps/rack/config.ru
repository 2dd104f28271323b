# frozen_string_literal: true

# The HTTP suite's sample payments app (tests/http/README.md) on idem_keys-rack without a framework: plain Rack,
# the pg gem and one ConnectionPool of PG::Connection (the connection_pool gem), shared by the middleware and the
# app, served by puma (serve.sh, puma.rb); the same file on Rack 2.2 (the host) and Rack 3.1 (the trixie root).
# IDEM_LEASE and IDEM_WAIT are seconds ("4"; "4s" is taken too); IDEM_OFF=1 runs it without the middleware (the
# benchmark's baseline); IDEM_TX=1 runs the middleware in transactional mode, where the recovered-attempt lookup and
# the payment insert run on attempt.connection, in the key's transaction.
require "connection_pool"
require "json"
require "logger"
require "pg"
require "securerandom"
require "idem_keys/rack"

# The middleware must be the gem built from packages/idem_keys-rack and installed into this app's GEM_HOME
# (setup.sh), as a user installs it, not the source tree.
installed = Gem.loaded_specs["idem_keys-rack"]&.full_gem_path.to_s
unless ENV["GEM_HOME"] && installed.start_with?(File.join(ENV["GEM_HOME"], "gems"))
  abort "idem_keys-rack must come from the gem installed in GEM_HOME (setup.sh), not #{installed.inspect}"
end

OFF = ENV["IDEM_OFF"] == "1"
TX = ENV["IDEM_TX"] == "1"

# A duration from the environment in seconds ("4", or "4s"), or default when unset.
module Seconds
  def self.from_env(name, default = nil)
    text = ENV[name].to_s.strip.delete_suffix("s")
    text.empty? ? default : Float(text)
  end
end
MAX_SLEEP_MS = 60_000
THREADS = 16 # puma.rb's; the pool has a connection for each, and two to spare

$stdout.sync = true
LOG = Logger.new($stdout, level: Logger::WARN)

# Connections are made when first needed, and again after a failed attempt: a server that is down only fails the
# requests that need it. connect_timeout bounds a checkout's connect, which the pool does not interrupt.
POOL = ConnectionPool.new(size: THREADS + 2, timeout: 5) do
  PG.connect(ENV.fetch("DATABASE_URL"), connect_timeout: 5, options: "-c client_min_messages=warning")
end

# The app's own problem+json answers, in the same shape as the middleware's. Header names in lower case, as Rack 3
# wants them (Rack 2 takes them too).
module Problem
  def self.response(status, title, code, detail, headers = {})
    body = JSON.generate(type: "about:blank", title: title, status: status, detail: detail, code: code)
    [status, { "content-type" => "application/problem+json" }.merge(headers), [body]]
  end
end

# Outermost: an exception of the app's is answered 500 here, as Rails' exceptions_app does, outside the
# idempotency middleware (which has released the key by then); the attempt is in the env all the same, so this
# 500 names its outcome too.
class ErrorPage
  def initialize(app)
    @app = app
  end

  def call(env)
    @app.call(env)
  rescue StandardError => e
    LOG.error("#{env['REQUEST_METHOD']} #{env['PATH_INFO']}: #{e.class}: #{e.message}")
    attempt = IdemKeys::Rack.attempt(env)
    Problem.response(500, "Internal Server Error", "internal-error", "the handler failed",
                     attempt ? { "idempotency-outcome" => attempt.outcome } : {})
  end
end

# A stand-in for real authentication, before the middleware: the tenant is the bearer token.
class Authenticate
  BEARER = /\ABearer ([A-Za-z0-9_-]{1,64})\z/.freeze

  def initialize(app)
    @app = app
  end

  def call(env)
    bearer = BEARER.match(env["HTTP_AUTHORIZATION"].to_s)
    unless bearer
      return Problem.response(401, "Unauthorized", "unauthenticated", "Authorization: Bearer <tenant> is required")
                    .tap { |answer| answer[1]["www-authenticate"] = "Bearer" }
    end

    env["sample.tenant"] = bearer[1]
    @app.call(env)
  end
end

# POST /payments and GET /payments/<id>.
class Payments
  SLOW = /\Acus_slow_([0-9]{1,5})\z/.freeze
  CRASH_AFTER_WRITE = /\Acus_crash_after_write_([0-9]{1,5})\z/.freeze
  SHOW = %r{\A/payments/([^/]+)\z}.freeze
  COLUMNS = "id, tenant, amount, currency, customer_id"

  def call(env)
    method, path = env["REQUEST_METHOD"], env["PATH_INFO"]
    return create(env) if method == "POST" && path == "/payments"
    return show(env, Regexp.last_match(1)) if method == "GET" && SHOW.match(path)

    Problem.response(404, "Not Found", "route-not-found", "no such route")
  end

  private

  def create(env)
    tenant = env["sample.tenant"]
    attempt = IdemKeys::Rack.attempt(env) # nil with IDEM_OFF=1
    pay = begin
      JSON.parse(env["rack.input"].read)
    rescue JSON::ParserError
      nil
    end
    unless valid?(pay)
      return Problem.response(400, "Bad Request", "invalid-payment",
                              "amount (an integer > 0), currency (3 letters) and customer_id (a string) are required")
    end

    customer = pay["customer_id"]
    if (slow = SLOW.match(customer))
      sleep([slow[1].to_i, MAX_SLEEP_MS].min / 1000.0)
    elsif customer == "cus_fail_503"
      return Problem.response(503, "Service Unavailable", "provider-unavailable",
                              "the provider refused; nothing was charged", "retry-after" => "1")
    elsif customer == "cus_fail_402"
      return Problem.response(402, "Payment Required", "card-declined", "the card was declined")
    elsif customer == "cus_throw"
      raise "cus_throw: the handler throws"
    elsif customer == "cus_unsettled"
      attempt&.leave_unsettled! # maybe charged: the next retry recovers the key and looks first
      return Problem.response(502, "Bad Gateway", "provider-unreachable",
                              "the provider did not answer: maybe charged")
    end

    # With IDEM_TX=1 these statements run on attempt.connection, inside the middleware's transaction: the payment
    # commits with the stored answer, or not at all. Otherwise each commits on its own.
    payment = nil
    begin
      with_connection(attempt) do |conn|
        if attempt&.recovered?
          # The previous owner died (or outlived its lease) after its claim: it may have paid already.
          payment = conn.exec_params("SELECT #{COLUMNS} FROM payments WHERE tenant = $1 AND idempotency_key = $2 " \
                                     "ORDER BY id LIMIT 1", [tenant, attempt.key]).first
        end
        payment ||= conn.exec_params("INSERT INTO payments (tenant, idempotency_key, amount, currency, customer_id) " \
                                     "VALUES ($1, $2, $3, $4, $5) RETURNING #{COLUMNS}",
                                     [tenant, attempt&.key, pay["amount"], pay["currency"], customer]).first
        # Deferred: in a transaction the duplicate is refused by COMMIT, after the answer is stored.
        conn.exec("INSERT INTO commit_guard VALUES (1), (1)") if customer == "cus_commit_fails"
      end
    rescue PG::Error => e
      # 503 releases the key (in transactional mode the insert is rolled back with it): the retry pays.
      LOG.warn("payments insert: #{e.message}")
      return Problem.response(503, "Service Unavailable", "database-unavailable", "nothing was charged: try again",
                              "retry-after" => "1")
    end
    raise "cus_throw_after_write: the handler throws after its insert" if customer == "cus_throw_after_write"

    if (crash = CRASH_AFTER_WRITE.match(customer))
      sleep([crash[1].to_i, MAX_SLEEP_MS].min / 1000.0) # time for a test to SIGKILL the app before the answer
    end
    body = JSON.generate(as_payment(payment).merge(attempt: attempt ? attempt.outcome : "claimed"))
    [201, { "content-type" => "application/json", "location" => "/payments/#{payment['id']}",
            "x-request-id" => SecureRandom.hex(8) }, [body]]
  end

  def show(env, id)
    payment = if id.match?(/\A[0-9]{1,18}\z/)
                with_connection(nil) do |conn|
                  conn.exec_params("SELECT #{COLUMNS} FROM payments WHERE id = $1 AND tenant = $2",
                                   [id, env["sample.tenant"]]).first
                end
              end
    return Problem.response(404, "Not Found", "payment-not-found", "no such payment for this tenant") unless payment

    [200, { "content-type" => "application/json" }, [JSON.generate(as_payment(payment))]]
  end

  # The key's transaction in transactional mode; otherwise a connection of the pool. A connection lost under the
  # app's own statement (PostgreSQL restarted) gets a new session before it goes back, as ActiveRecord's verify
  # gives a Rails app; the middleware repairs the connections it takes itself.
  def with_connection(attempt, &block)
    return block.call(attempt.connection) if attempt&.connection

    POOL.with do |conn|
      block.call(conn)
    ensure
      begin
        conn.reset unless conn.status == PG::CONNECTION_OK
      rescue PG::Error
        nil # still down: the next user of the connection fails, and resets it again
      end
    end
  end

  def as_payment(row)
    { id: row["id"].to_i, tenant: row["tenant"], amount: row["amount"].to_i, currency: row["currency"],
      customer_id: row["customer_id"] }
  end

  def valid?(pay)
    pay.is_a?(Hash) && pay["amount"].is_a?(Integer) && pay["amount"].positive? && pay["amount"] < 2**63 &&
      pay["currency"].is_a?(String) && pay["currency"].match?(/\A[A-Za-z]{3}\z/) &&
      pay["customer_id"].is_a?(String) && !pay["customer_id"].empty?
  end
end

# Apps starting side by side would race CREATE TABLE IF NOT EXISTS on the catalog (a unique violation): the lock,
# held to the end of this transaction, lets one create it and the others find it.
POOL.with do |conn|
  conn.transaction do
    conn.exec("SELECT pg_advisory_xact_lock(hashtext('idem_keys sample app: payments table'))")
    conn.exec(<<~SQL)
      CREATE TABLE IF NOT EXISTS payments (
        id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text, amount bigint NOT NULL,
        currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())
    SQL
    # cus_commit_fails' two equal rows: refused at COMMIT in transactional mode, at once otherwise.
    conn.exec("CREATE TABLE IF NOT EXISTS commit_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)")
  end
end

use ErrorPage
use Authenticate
unless OFF
  use IdemKeys::Rack::Middleware,
      pool: POOL, scope: ->(env) { env["sample.tenant"] },
      lease: Seconds.from_env("IDEM_LEASE", 30), wait: Seconds.from_env("IDEM_WAIT"),
      outcome_header: "Idempotency-Outcome", transactional: TX, logger: LOG
end
mode = if OFF then ", IDEM_OFF" elsif TX then ", transactional" else "" end
$stdout.puts "http sample (rack #{Rack.release}) with idem_keys-rack #{IdemKeys::Rack::VERSION}#{mode}"

run Payments.new
