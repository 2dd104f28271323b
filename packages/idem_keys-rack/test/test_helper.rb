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

  def initialize(size: 4, timeout: 2, url: DATABASE_URL)
    @size = size
    @timeout = timeout
    @all = Array.new(size) { PG.connect(url) }
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
end

# The app behind the middleware: counts its runs, keeps the attempts it saw and the bodies it read, and answers
# with `answer.call(env, attempt)` (a Rack triple), by default 201 "paid".
class Handler
  attr_reader :runs, :attempts, :bodies
  attr_accessor :answer

  def initialize(&answer)
    @answer = answer || lambda do |_env, _attempt|
      [201, { "Content-Type" => "text/plain", "Location" => "/pay/1" }, ["paid"]]
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

  # The middleware behind a stand-in for authentication (the tenant from X-Tenant), checked by Rack::Lint on
  # both sides. A real app takes the tenant from verified credentials, never from a header the client chooses.
  def app_for(handler, pool, **options)
    log = options.delete(:log) || StringIO.new
    middleware = IdemKeys::Rack::Middleware.new(::Rack::Lint.new(handler), pool: pool,
                                                scope: ->(env) { env["test.tenant"] }, outcome_header: OUTCOME,
                                                logger: Logger.new(log), **options)
    authenticated = lambda do |env|
      env["test.tenant"] = env["HTTP_X_TENANT"]
      middleware.call(env)
    end
    ::Rack::Lint.new(authenticated)
  end

  def post(app, tenant, key, body = BODY, path: "/pay", method: "POST", type: "application/json", headers: {})
    env = { method: method, input: body, "HTTP_X_TENANT" => tenant }
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

  def assert_problem(reply, status, code)
    assert_equal status, reply.status, "expected #{status} #{code}, got #{reply.status} #{reply.body[0, 200]}"
    assert_equal "application/problem+json", reply.headers["Content-Type"]
    assert_equal IdemKeys::Rack::Problems.body(code), reply.body
    assert_equal code, JSON.parse(reply.body)["code"]
  end
end
