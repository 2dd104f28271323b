# frozen_string_literal: true

# The package's tests run against the INSTALLED gem (test.sh builds it and installs it into a GEM_HOME of its
# own): lib/ is not on the load path, and this checks where the code came from.
require "minitest/autorun"
require "json"
require "logger"
require "securerandom"
require "stringio"
require "pg"
require "rack"
require "rack/lint"
require "rack/mock"
require "idem_keys/rack"

installed = Gem.loaded_specs["idem_keys-rack"]&.full_gem_path.to_s
unless ENV["GEM_HOME"] && installed.start_with?(File.join(ENV["GEM_HOME"], "gems")) &&
       $LOADED_FEATURES.grep(%r{idem_keys/rack/middleware\.rb}).all? { |f| f.start_with?(installed) }
  abort "idem_keys-rack must be loaded from the gem installed in GEM_HOME (test.sh), not from #{installed.inspect}"
end

DATABASE_URL = ENV.fetch("DATABASE_URL") { abort "DATABASE_URL must name a database with idem_keys (test.sh)" }
BODY = '{"amount": 1000, "currency": "EUR"}'
# Rack 3 wants lower-case response header names, and a header of several values as an Array (Rack 2: joined with
# "\n"); Rack::MockResponse reads names case-insensitively in both.
RACK3 = Gem::Version.new(Rack.release) >= Gem::Version.new("3")

# The contract every idem_keys middleware's tests load (contract/ at the repository's root, or IDEM_CONTRACT_DIR):
# problems.json, keys.json, sql.json, fingerprints.json.
module Contract
  DIR = ENV.fetch("IDEM_CONTRACT_DIR") { File.expand_path("../../../contract", __dir__) }

  module_function

  def load(name)
    @loaded ||= {}
    @loaded[name] ||= JSON.parse(File.read(File.join(DIR, "#{name}.json"))).freeze
  end

  # code => the problem's entry (status, title, detail, retry_after, body).
  def problems
    load("problems")["problems"].to_h { |problem| [problem["code"], problem] }
  end
end

module Minitest
  class Test
    # A skipped test fails: every rule must run, here and in CI.
    def skip(message = nil, _unused = nil)
      flunk("skipped, which this suite does not allow: #{message}")
    end
  end
end

# A small pool of PG::Connection with #with, as the connection_pool gem's: `size` connections, and a checkout
# that gives up after `timeout` seconds. idle? says whether every connection is back and outside a transaction.
class TestPool
  class Timeout < StandardError; end

  attr_reader :size

  def initialize(size: 4, timeout: 2, url: DATABASE_URL, **connect)
    @size = size
    @timeout = timeout
    @all = Array.new(size) { PG.connect(url, **connect) }
    @free = Queue.new
    @all.each { |c| @free << c }
  end

  def with
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + @timeout
    conn = nil
    loop do
      conn = @free.pop(true)
      break
    rescue ThreadError
      raise Timeout, "no connection within #{@timeout} s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.01
    end
    begin
      yield conn
    ensure
      @free << conn
    end
  end

  def idle?
    @free.size == @size && @all.all? { |c| c.transaction_status == PG::PQTRANS_IDLE }
  end

  def close
    @all.each(&:close)
  end
end

# One connection of the tests' own, to look from outside.
module Database
  module_function

  def conn
    Thread.current[:idem_test_conn] ||= PG.connect(DATABASE_URL).tap { |c| c.exec("SET client_min_messages = warning") }
  end

  def exec(sql, params = [])
    conn.exec_params(sql, params)
  end

  # The key as another connection sees it: "replay", "in_progress", or nil when no row is committed.
  def stored(tenant, key)
    exec("SELECT (idem_lookup($1, $2)).outcome", [tenant, key]).getvalue(0, 0)
  end

  # Ends every session of application_name from this one, as a restart or a failover ends a pool's, and waits
  # (up to 5 s each) until they are gone. Only sessions the test named: other users of the server are not
  # touched.
  def terminate(application_name)
    exec("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity " \
         "WHERE application_name = $1", [application_name]).getvalue(0, 0).to_i
  end

  # Waits (up to 10 s) until a session of application_name runs a statement LIKE pattern.
  def wait_until_running(application_name, pattern)
    500.times do
      return if exec("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' " \
                     "AND query LIKE $2", [application_name, pattern]).getvalue(0, 0).to_i.positive?

      sleep 0.02
    end
    raise "no session of #{application_name} ran #{pattern} within 10 s"
  end

  # rack_commit_effects: a row acts when its transaction commits (a deferred constraint trigger), by its effect:
  # 'terminate' ends the committing session (FATAL 57P01 in place of the COMMIT's answer: nothing committed, and
  # the client cannot know it), 'sleep' holds the COMMIT for 120 s (for an interrupt to land in), 'none' nothing.
  def commit_effects!
    return if @commit_effects

    exec("SET client_min_messages = warning")
    exec("CREATE TABLE IF NOT EXISTS rack_commit_effects (tenant text NOT NULL, key text NOT NULL, " \
         "effect text NOT NULL)")
    exec(<<~SQL)
      CREATE OR REPLACE FUNCTION rack_commit_effect() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.effect = 'terminate' THEN
          PERFORM pg_terminate_backend(pg_backend_pid());
        ELSIF NEW.effect = 'sleep' THEN
          PERFORM pg_sleep(120);
        END IF;
        RETURN NULL;
      END $$
    SQL
    exec("DROP TRIGGER IF EXISTS rack_commit_effect ON rack_commit_effects")
    exec("CREATE CONSTRAINT TRIGGER rack_commit_effect AFTER INSERT ON rack_commit_effects DEFERRABLE INITIALLY " \
         "DEFERRED FOR EACH ROW EXECUTE FUNCTION rack_commit_effect()")
    @commit_effects = true
  end

  def commit_effects(tenant, key)
    exec("SELECT count(*) FROM rack_commit_effects WHERE tenant = $1 AND key = $2", [tenant, key]).getvalue(0, 0).to_i
  end
end

# Stands in for Rack::Timeout's RequestTimeoutException (a RuntimeError), which Rack::Timeout raises into the
# request's thread wherever it is: in the handler, or in a statement of the middleware's.
class RequestTimeout < RuntimeError; end

# The app behind the middleware: counts its runs, keeps the attempts it saw and the bodies it read, and answers
# with `answer.call(env, attempt)` (a Rack triple), by default 201 "paid".
class Handler
  attr_reader :runs, :attempts, :bodies
  attr_accessor :answer

  def initialize(&answer)
    @answer = answer || lambda do |_env, _attempt|
      [201, { "content-type" => "text/plain", "location" => "/pay/1" }, ["paid"]]
    end
    @runs = 0
    @attempts = []
    @bodies = []
    @lock = Mutex.new
  end

  def call(env)
    attempt = IdemKeys::Rack.attempt(env)
    @lock.synchronize do
      @runs += 1
      @attempts << attempt
      @bodies << env["rack.input"].read
    end
    @answer.call(env, attempt)
  end
end

module Helpers
  OUTCOME = "Idempotency-Outcome"

  def tenant
    @tenant ||= "test-#{SecureRandom.hex(6)}"
  end

  def fresh_key
    "k-#{SecureRandom.hex(8)}"
  end

  # A session name (application_name) of the test's own, for the sessions it ends (Database.terminate).
  def session_name(what)
    "idem-rack-test-#{what}-#{SecureRandom.hex(4)}"
  end

  # Waits (up to 10 s) until the block is true.
  def wait_until(what)
    500.times do
      return if yield

      sleep 0.02
    end
    flunk("#{what}: not within 10 s")
  end

  # The middleware behind a stand-in for authentication (the tenant from X-Tenant), checked by Rack::Lint on
  # both sides. A real app takes the tenant from verified credentials, never from a header the client chooses.
  def app_for(handler, pool, **options)
    log = options.delete(:log) || StringIO.new
    middleware = IdemKeys::Rack::Middleware.new(::Rack::Lint.new(handler), pool: pool,
                                                scope: ->(env) { env["test.tenant"] }, outcome_header: OUTCOME,
                                                logger: Logger.new(log), **options)
    authenticated = lambda do |env|
      env["test.tenant"] = env["HTTP_X_TENANT"]
      # What a server may hand over that Rack 2's Lint would refuse (post's input:), after the outer Lint.
      if env.key?("test.input")
        input = env.delete("test.input")
        input == :none ? env.delete("rack.input") : env["rack.input"] = input
      end
      middleware.call(env)
    end
    ::Rack::Lint.new(authenticated)
  end

  # A middleware around handler, both checked by Rack::Lint, with the tenant from X-Tenant and no log.
  def linted(handler, **options)
    linted_outside(::Rack::Lint.new(handler), **options)
  end

  # The same with Rack::Lint on the middleware's side alone: the handler sees the env the middleware hands it.
  def linted_outside(handler, **options)
    defaults = { scope: ->(env) { env["HTTP_X_TENANT"] }, logger: Logger.new(nil) }
    ::Rack::Lint.new(IdemKeys::Rack::Middleware.new(handler, **defaults.merge(options)))
  end

  # input: the rack.input the middleware gets in place of body's (:none: no rack.input at all).
  def post(app, tenant, key, body = BODY, path: "/pay", method: "POST", type: "application/json", headers: {},
           input: nil)
    env = { method: method, input: body, "HTTP_X_TENANT" => tenant }
    env["test.input"] = input if input
    env["CONTENT_TYPE"] = type if type
    env["HTTP_IDEMPOTENCY_KEY"] = key if key
    # A nil value removes the variable (CONTENT_LENGTH: a chunked request), before Rack::Lint sees the env.
    without_nils = lambda do |e|
      e.compact!
      app.call(e)
    end
    ::Rack::MockRequest.new(without_nils).request(method, path, env.merge(headers))
  end

  # Runs the block in a thread; .value waits for it.
  def later(&block)
    Thread.new(&block).tap { |t| t.report_on_exception = false }
  end

  # The reply is the contract's problem code, byte for byte: its status, Content-Type, body and Retry-After
  # (contract/problems.json; "lease": the first attempt's, at least 1).
  def assert_problem(reply, status, code)
    problem = Contract.problems.fetch(code)
    assert_equal status, problem["status"], "#{code} is #{problem['status']} in the contract"
    assert_equal status, reply.status, "expected #{status} #{code}, got #{reply.status} #{reply.body[0, 200]}"
    assert_equal Contract.load("problems")["content_type"], reply.headers["Content-Type"]
    assert_equal problem["body"].b, reply.body.b
    case problem["retry_after"]
    when nil then assert_nil reply.headers["Retry-After"], "#{code}: no Retry-After"
    when "lease" then assert_operator reply.headers["Retry-After"].to_i, :>=, 1
    else assert_equal problem["retry_after"].to_s, reply.headers["Retry-After"], "#{code}: Retry-After"
    end
  end
end
