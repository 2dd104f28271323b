# frozen_string_literal: true

require_relative "active_record_helper"

# A payment whose save also writes an audit row (amount 99) first, and is refused (save returns false) for an
# amount of 13: ActiveRecord's save is a transaction of its own, rolled back when it returns false.
class RackAuditedPayment < ActiveRecord::Base
  self.table_name = "rack_ar_payments"
  before_save do
    RackTxPayment.create!(tenant: tenant, idempotency_key: idempotency_key, amount: 99)
    throw :abort if amount == 13
  end
end

# A payment whose transactional callbacks say when they ran (CALLBACKS) and what another session then saw of its
# key: stored (the key's answer committed) or not.
class RackCallbackPayment < ActiveRecord::Base
  self.table_name = "rack_ar_payments"
  CALLBACKS = Queue.new
  after_commit { CALLBACKS << [:after_commit, Database.stored(tenant, idempotency_key)] }
  after_rollback { CALLBACKS << [:after_rollback, Database.stored(tenant, idempotency_key)] }
end

# A payment whose after_commit callback raises (once its transaction has committed).
class RackFailingHookPayment < ActiveRecord::Base
  self.table_name = "rack_ar_payments"
  after_commit { raise "the after_commit hook failed" }
end

# In transactional mode on ActiveRecord, the handler's own transactions (its `transaction` blocks, and the one
# each save opens) behave as they do without the middleware: a Rollback or a save that returns false undoes its
# block and nothing else, nested blocks and exceptions are as ActiveRecord makes them, and after_commit callbacks
# run after the key's COMMIT (after_rollback when it rolls back). The key's claim and answer are never undone by
# the app's Rollback.
class ActiveRecordSavepointsTest < Minitest::Test
  include ActiveRecordHelpers

  def setup
    create_tables
    RackCallbackPayment::CALLBACKS.clear
  end

  def teardown
    assert_pool_idle
  end

  # The transactional callbacks that ran since the last call, in order.
  def callbacks_run
    Array.new(RackCallbackPayment::CALLBACKS.size) { RackCallbackPayment::CALLBACKS.pop }
  end

  def pay(key, amount, model = RackTxPayment)
    model.create!(tenant: tenant, idempotency_key: key, amount: amount)
  end

  # Runs work.call(key) in a handler behind the middleware (transactional) and, with another key, in the same
  # app without it; returns the amounts each left committed, [with, without].
  def with_and_without_the_middleware(&work)
    handler = ->(env) { work.call(env["test.key"]); [201, {}, ["paid"]] }
    keyed = lambda do |env|
      env["test.key"] = IdemKeys::Rack.attempt(env)&.key || env["HTTP_X_KEY"]
      handler.call(env)
    end
    with, without = fresh_key, fresh_key
    reply = post(app_for(keyed, :active_record, transactional: true), tenant, with)
    assert_equal [201, "replay"], [reply.status, Database.stored(tenant, with)] # the key's claim and answer stay
    plain = ::Rack::Lint.new(->(env) { keyed.call(env.merge("HTTP_X_KEY" => without)) })
    assert_equal 201, ::Rack::MockRequest.new(plain).post("/pay", input: BODY).status
    [with, without].map do |key|
      Database.exec("SELECT amount FROM rack_ar_payments WHERE tenant = $1 AND idempotency_key = $2 ORDER BY amount",
                    [tenant, key]).column_values(0).map(&:to_i)
    end
  end

  def test_a_rollback_in_the_handlers_block_undoes_that_block_only
    with, without = with_and_without_the_middleware do |key|
      RackTxPayment.transaction do
        pay(key, 1)
        raise ActiveRecord::Rollback
      end
      pay(key, 2)
    end
    assert_equal [2], without
    assert_equal without, with
  end

  def test_a_save_that_returns_false_undoes_its_writes
    with, without = with_and_without_the_middleware do |key|
      refused = RackAuditedPayment.new(tenant: tenant, idempotency_key: key, amount: 13)
      raise "the save was not refused" if refused.save

      pay(key, 2)
    end
    assert_equal [2], without # neither the refused payment nor its audit row
    assert_equal without, with
  end

  def test_nested_blocks_and_exceptions_behave_as_without_the_middleware
    with, without = with_and_without_the_middleware do |key|
      RackTxPayment.transaction(requires_new: true) do
        pay(key, 3)
        RackTxPayment.transaction(requires_new: true) do
          pay(key, 4)
          raise ActiveRecord::Rollback
        end
        RackTxPayment.transaction do # joins the block above: its Rollback is swallowed, as ActiveRecord does
          pay(key, 5)
          raise ActiveRecord::Rollback
        end
      end
      begin
        RackTxPayment.transaction do
          pay(key, 6)
          raise "boom"
        end
      rescue RuntimeError
        nil
      end
    end
    assert_equal [3, 5], without
    assert_equal without, with
  end

  def test_after_commit_runs_after_the_keys_commit_and_not_on_rollback
    handler, key = Handler.new { |_env, attempt|
      pay(attempt.key, 1, RackCallbackPayment)
      [503, {}, ["provider down"]] # retryable: rolled back
    }, fresh_key
    app = app_for(handler, :active_record, transactional: true)
    assert_equal 503, post(app, tenant, key).status
    assert_equal [[:after_rollback, nil]], callbacks_run
    handler.answer = lambda do |_env, attempt|
      RackCallbackPayment.transaction { pay(attempt.key, 2, RackCallbackPayment) }
      [201, {}, ["paid"]]
    end
    assert_equal 201, post(app, tenant, key).status
    # Run once the key's answer was committed with the payment, not when the handler's block ended.
    assert_equal [[:after_commit, "replay"]], callbacks_run
    assert_equal 1, payments(key)
  end

  def test_an_after_commit_hook_that_raises_after_the_commit_sends_the_stored_answer
    handler, key = Handler.new { |_env, attempt|
      payment = pay(attempt.key, 1, RackFailingHookPayment)
      [201, { "location" => "/pay/#{payment.id}" }, ["paid"]]
    }, fresh_key
    log = StringIO.new
    app = app_for(handler, :active_record, transactional: true, log: log)
    first = post(app, tenant, key)
    assert_equal [201, "paid", "claimed"], [first.status, first.body, first.headers["Idempotency-Outcome"]]
    assert_match(/committed, then an after_commit callback raised.*the after_commit hook failed/, log.string)
    again = post(app, tenant, key)
    assert_equal [201, "paid", "true"], [again.status, again.body, again.headers["Idempotent-Replayed"]]
    assert_equal 1, payments(key)
  end
end
