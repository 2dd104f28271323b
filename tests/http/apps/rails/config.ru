# frozen_string_literal: true

# The HTTP suite's sample payments app (tests/http/README.md) on idem_keys-rack: a minimal Rails app in one file,
# ActiveRecord on DATABASE_URL, served by puma (serve.sh, puma.rb); the same file on both ends of the gem's range:
# Rails 6.1 on Rack 2.2 (the host, bookworm) and Rails 7.2 on Rack 3.1 (the trixie root). IDEM_LEASE and IDEM_WAIT
# are seconds ("4"; "4s" is taken too); IDEM_OFF=1 runs it without the middleware (the benchmark's baseline);
# IDEM_TX=1 runs the middleware in transactional mode, where the payment insert (ActiveRecord) is in the key's
# transaction.
# Compiled Ruby cached in tmp/bootsnap-$IDEM_STACK (Debian's bootsnap; its load-path cache needs Bundler, so only
# the compile cache): a restart after the suite's SIGKILL must listen again well within the app's 4 s lease.
require "bootsnap"
Bootsnap.setup(cache_dir: File.join(__dir__, "tmp", "bootsnap-#{ENV.fetch('IDEM_STACK', 'host')}"),
               development_mode: false, load_path_cache: false, compile_cache_iseq: true, compile_cache_yaml: false,
               compile_cache_json: false)
require "json"
require "logger"
require "securerandom"
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
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

# A stand-in for real authentication, before the middleware: the tenant is the bearer token.
class Authenticate
  BEARER = /\ABearer ([A-Za-z0-9_-]{1,64})\z/.freeze

  def initialize(app)
    @app = app
  end

  def call(env)
    bearer = BEARER.match(env["HTTP_AUTHORIZATION"].to_s)
    if bearer.nil?
      body = JSON.generate(type: "about:blank", title: "Unauthorized", status: 401, detail: "Authorization: Bearer " \
                                                                                            "<tenant> is required",
                           code: "unauthenticated")
      return [401, { "content-type" => "application/problem+json", "www-authenticate" => "Bearer" }, [body]]
    end
    env["sample.tenant"] = bearer[1]
    @app.call(env)
  end
end

class SampleApp < Rails::Application
  config.root = __dir__
  config.api_only = true
  config.eager_load = false
  config.secret_key_base = "a sample app: no sessions, no cookies, nothing signed"
  config.logger = ActiveSupport::Logger.new($stdout)
  config.log_level = :warn
  config.consider_all_requests_local = false
  # Rails 7.1 names the choice (:all); 6.1 takes true.
  config.action_dispatch.show_exceptions = Rails.gem_version >= Gem::Version.new("7.1") ? :all : true
  # Rails' own 500 for an exception is answered outside every added middleware; the attempt is in the env all the
  # same, so this 500 names its outcome too (the key was released).
  config.exceptions_app = lambda do |env|
    attempt = IdemKeys::Rack.attempt(env)
    headers = { "content-type" => "application/problem+json" }
    headers["idempotency-outcome"] = attempt.outcome if attempt
    [500, headers, [JSON.generate(type: "about:blank", title: "Internal Server Error", status: 500,
                                  detail: "the handler failed", code: "internal-error")]]
  end
  # The app's answer carries X-Request-Id of its own (off the middleware's allow-list, so never replayed); Rails'
  # RequestId would add one to every answer, replays included.
  config.middleware.delete ActionDispatch::RequestId
  config.middleware.use Authenticate
  unless OFF
    config.middleware.use IdemKeys::Rack::Middleware,
                          pool: :active_record, scope: ->(env) { env["sample.tenant"] },
                          lease: Seconds.from_env("IDEM_LEASE", 30), wait: Seconds.from_env("IDEM_WAIT"),
                          outcome_header: "Idempotency-Outcome", transactional: TX,
                          logger: ActiveSupport::Logger.new($stdout)
  end

  routes.append do
    post "/payments", to: "payments#create"
    get "/payments/:id", to: "payments#show"
  end
end

class Payment < ActiveRecord::Base
  def as_payment
    { id: id, tenant: tenant, amount: amount, currency: currency, customer_id: customer_id }
  end
end

class PaymentsController < ActionController::API
  SLOW = /\Acus_slow_([0-9]{1,5})\z/.freeze
  CRASH_AFTER_WRITE = /\Acus_crash_after_write_([0-9]{1,5})\z/.freeze

  def create
    tenant = request.env["sample.tenant"]
    attempt = IdemKeys::Rack.attempt(request.env) # nil with IDEM_OFF=1
    pay = begin
      JSON.parse(request.raw_post)
    rescue JSON::ParserError
      nil
    end
    unless valid?(pay)
      return problem(400, "Bad Request", "invalid-payment",
                     "amount (an integer > 0), currency (3 letters) and customer_id (a string) are required")
    end

    customer = pay["customer_id"]
    if (slow = SLOW.match(customer))
      sleep([slow[1].to_i, MAX_SLEEP_MS].min / 1000.0)
    elsif customer == "cus_fail_503"
      response.set_header("Retry-After", "1")
      return problem(503, "Service Unavailable", "provider-unavailable", "the provider refused; nothing was charged")
    elsif customer == "cus_fail_402"
      return problem(402, "Payment Required", "card-declined", "the card was declined")
    elsif customer == "cus_throw"
      raise "cus_throw: the handler throws"
    elsif customer == "cus_unsettled"
      attempt&.leave_unsettled! # maybe charged: the next retry recovers the key and looks first
      return problem(502, "Bad Gateway", "provider-unreachable", "the provider did not answer: maybe charged")
    end

    # With IDEM_TX=1 these statements run on the thread's connection inside the middleware's transaction: the
    # payment commits with the stored answer, or not at all. Otherwise each commits on its own.
    payment = nil
    begin
      if attempt&.recovered?
        # The previous owner died (or outlived its lease) after its claim: it may have paid already.
        payment = Payment.where(tenant: tenant, idempotency_key: attempt.key).order(:id).first
      end
      payment ||= Payment.create!(tenant: tenant, idempotency_key: attempt&.key, amount: pay["amount"],
                                  currency: pay["currency"], customer_id: customer)
      # Deferred: in a transaction the duplicate is refused by COMMIT, after the answer is stored.
      Payment.connection.execute("INSERT INTO commit_guard VALUES (1), (1)") if customer == "cus_commit_fails"
    rescue ActiveRecord::ActiveRecordError => e
      # 503 releases the key (in transactional mode the insert is rolled back with it): the retry pays.
      logger.warn("payments insert: #{e.message}")
      response.set_header("Retry-After", "1")
      return problem(503, "Service Unavailable", "database-unavailable", "nothing was charged: try again")
    end
    raise "cus_throw_after_write: the handler throws after its insert" if customer == "cus_throw_after_write"

    if (crash = CRASH_AFTER_WRITE.match(customer))
      sleep([crash[1].to_i, MAX_SLEEP_MS].min / 1000.0) # time for a test to SIGKILL the app before the answer
    end
    response.set_header("X-Request-Id", SecureRandom.hex(8))
    render json: payment.as_payment.merge(attempt: attempt ? attempt.outcome : "claimed"), status: 201,
           location: "/payments/#{payment.id}"
  end

  def show
    id = params[:id]
    payment = id.match?(/\A[0-9]{1,18}\z/) && Payment.find_by(id: id, tenant: request.env["sample.tenant"])
    return problem(404, "Not Found", "payment-not-found", "no such payment for this tenant") unless payment

    render json: payment.as_payment
  end

  private

  def valid?(pay)
    pay.is_a?(Hash) && pay["amount"].is_a?(Integer) && pay["amount"].positive? && pay["amount"] < 2**63 &&
      pay["currency"].is_a?(String) && pay["currency"].match?(/\A[A-Za-z]{3}\z/) &&
      pay["customer_id"].is_a?(String) && !pay["customer_id"].empty?
  end

  # The app's own errors, in the same problem+json shape as the middleware's.
  def problem(status, title, code, detail)
    render body: JSON.generate(type: "about:blank", title: title, status: status, detail: detail, code: code),
           status: status, content_type: "application/problem+json"
  end
end

SampleApp.initialize!
ActiveRecord::Base.establish_connection(url: ENV.fetch("DATABASE_URL"), pool: THREADS + 2)
# Apps starting side by side would race CREATE TABLE IF NOT EXISTS on the catalog (a unique violation): the lock,
# held to the end of this transaction, lets one create it and the others find it.
ActiveRecord::Base.transaction do
  connection = ActiveRecord::Base.connection
  connection.execute("SELECT pg_advisory_xact_lock(hashtext('idem_keys sample app: payments table'))")
  connection.execute(<<~SQL)
    CREATE TABLE IF NOT EXISTS payments (
      id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text, amount bigint NOT NULL,
      currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())
  SQL
  # cus_commit_fails' two equal rows: refused at COMMIT in transactional mode, at once otherwise.
  connection.execute("CREATE TABLE IF NOT EXISTS commit_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)")
end
ActiveRecord::Base.connection_handler.clear_active_connections!
mode = if OFF then ", IDEM_OFF" elsif TX then ", transactional" else "" end
$stdout.puts "http sample (rails #{Rails.version}, rack #{Rack.release}) with idem_keys-rack " \
             "#{IdemKeys::Rack::VERSION}#{mode}"
$stdout.flush

run SampleApp
