# frozen_string_literal: true

require_relative "active_record_helper"
require "active_support/executor"
require "active_support/reloader"

# pool: :active_record as a Rails app runs it: each request inside Rails' executor with ActiveRecord's own hooks
# (the query cache on for the request, the thread's connection given back at its end), and inside a reloader (a
# development app's). On Rails 7.2 also with permanent_connection_checkout disallowed, which refuses
# ActiveRecord::Base.connection: the middleware checks its connection out with with_connection alone.
class ActiveRecordExecutorTest < Minitest::Test
  include ActiveRecordHelpers

  # An executor and a reloader of this test's own, with ActiveRecord's hooks, as the railtie gives Rails'.
  EXECUTOR = Class.new(ActiveSupport::Executor)
  ActiveRecord::QueryCache.install_executor_hooks(EXECUTOR)
  RELOADER = Class.new(ActiveSupport::Reloader)
  RELOADER.executor = EXECUTOR

  def setup
    create_tables
  end

  def teardown
    assert_pool_idle
  end

  # A handler that looks for the payment of a recovered attempt and pays, through ActiveRecord, as the HTTP
  # suite's Rails app does; its answer is the payment's id.
  def paying
    lambda do |_env, attempt|
      payment = RackTxPayment.where(tenant: attempt.scope, idempotency_key: attempt.key).first if attempt.recovered?
      payment ||= RackTxPayment.create!(tenant: attempt.scope, idempotency_key: attempt.key, amount: 1000)
      [201, { "location" => "/pay/#{payment.id}" }, [payment.id.to_s]]
    end
  end

  # The request env through app inside wrapper (the executor or the reloader), its body read inside too, as
  # ActionDispatch::Executor completes the executor when the server closes the body.
  def wrapped(app, wrapper)
    lambda do |env|
      wrapper.wrap do
        status, headers, body = app.call(env)
        parts = []
        body.each { |part| parts << part }
        body.close if body.respond_to?(:close)
        [status, headers, parts]
      end
    end
  end

  def assert_runs_once(wrapper, transactional)
    handler, key = Handler.new(&paying), fresh_key
    app = wrapped(app_for(handler, :active_record, transactional: transactional), wrapper)
    first = post(app, tenant, key)
    again = post(app, tenant, key)
    assert_equal [201, "claimed"], [first.status, first.headers["Idempotency-Outcome"]]
    assert_equal [201, first.body, "true"], [again.status, again.body, again.headers["Idempotent-Replayed"]]
    assert_problem post(app, tenant, key, "{}"), 422, "key-reused"
    assert_equal [1, 1, "replay"], [handler.runs, payments(key), Database.stored(tenant, key)]
    refute ActiveRecord::Base.connection_pool.active_connection?, "the request's connection was kept"
  end

  def test_inside_the_executor
    assert_runs_once(EXECUTOR, false)
  end

  def test_inside_the_executor_in_transactional_mode
    assert_runs_once(EXECUTOR, true)
  end

  def test_inside_the_reloader_in_transactional_mode
    assert_runs_once(RELOADER, true)
  end

  # Rails 7.2's permanent_connection_checkout = :disallowed raises on ActiveRecord::Base.connection; the
  # middleware never calls it. Before 7.2 there is no such setting, and the same requests run as they are.
  def test_without_permanent_connection_checkout
    setting = ActiveRecord.respond_to?(:permanent_connection_checkout=)
    was = ActiveRecord.permanent_connection_checkout if setting
    ActiveRecord.permanent_connection_checkout = :disallowed if setting
    begin
      assert_runs_once(EXECUTOR, false)
      assert_runs_once(EXECUTOR, true)
    ensure
      ActiveRecord.permanent_connection_checkout = was if setting
    end
  end
end
