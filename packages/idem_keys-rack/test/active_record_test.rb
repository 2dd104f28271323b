# frozen_string_literal: true

require_relative "active_record_helper"

# pool: :active_record, in both modes: the claim and the answer on ActiveRecord's own connection; in the
# transactional mode inside ActiveRecord::Base.transaction, with the handler's ActiveRecord writes.
class ActiveRecordTest < Minitest::Test
  include ActiveRecordHelpers

  def setup
    create_tables
  end

  def teardown
    assert_pool_idle
  end

  # A handler that pays through ActiveRecord, then answers `after` (201 with the payment's id).
  def paying(&after)
    lambda do |env, attempt|
      payment = RackTxPayment.create!(tenant: attempt.scope, idempotency_key: attempt.key, amount: 1000)
      after ? after.call(env, attempt) : [201, { "location" => "/pay/#{payment.id}" }, [payment.id.to_s]]
    end
  end

  def test_the_default_mode_on_activerecords_connection
    handler, key = Handler.new(&paying), fresh_key
    app = app_for(handler, :active_record)
    first = post(app, tenant, key)
    again = post(app, tenant, key)
    assert_equal [201, "claimed"], [first.status, first.headers["Idempotency-Outcome"]]
    assert_equal [first.body, "true"], [again.body, again.headers["Idempotent-Replayed"]]
    assert_problem post(app, tenant, key, "{}"), 422, "key-reused"
    assert_equal 1, payments(key)
    assert_nil handler.attempts.first.connection
  end

  def test_an_activerecord_class_as_the_pool
    handler, key = Handler.new, fresh_key
    app = app_for(handler, RackTxPayment, lease: 2.seconds) # an ActiveSupport::Duration is seconds too
    post(app, tenant, key)
    assert_equal "true", post(app, tenant, key).headers["Idempotent-Replayed"]
  end

  def test_the_writes_commit_with_the_answer
    seen_outside = []
    handler, key = Handler.new(&paying { |_env, attempt|
      assert_same ActiveRecord::Base.connection.raw_connection, attempt.connection
      seen_outside << [payments, Database.stored(tenant, attempt.key)]
      [201, {}, ["paid"]]
    }), fresh_key
    app = app_for(handler, :active_record, transactional: true)
    assert_equal [201, "claimed"], [post(app, tenant, key).status, handler.attempts.last.outcome]
    assert_equal [[0, nil]], seen_outside
    assert_equal [1, "replay"], [payments(key), Database.stored(tenant, key)]
    assert_equal "true", post(app, tenant, key).headers["Idempotent-Replayed"]
    assert_nil handler.attempts.first.connection
  end

  def test_an_exception_rolls_the_writes_back
    handler, key = Handler.new(&paying { raise "boom after the write" }), fresh_key
    app = app_for(handler, :active_record, transactional: true)
    assert_raises(RuntimeError) { post(app, tenant, key) }
    assert_equal [0, nil], [payments, Database.stored(tenant, key)]
    handler.answer = paying
    assert_equal 201, post(app, tenant, key).status
    assert_equal 1, payments(key)
  end

  # The handler's own block is a savepoint of the key's transaction: a retryable answer rolls it back with the rest.
  def test_the_handlers_committed_block_rolls_back_with_the_key
    handler, key = Handler.new { |_env, attempt|
      RackTxPayment.transaction do
        RackTxPayment.create!(tenant: attempt.scope, idempotency_key: attempt.key, amount: 1)
      end
      [503, {}, ["provider down"]] # retryable: everything rolls back, the handler's "committed" block too
    }, fresh_key
    app = app_for(handler, :active_record, transactional: true)
    assert_equal 503, post(app, tenant, key).status
    assert_equal [0, nil], [payments, Database.stored(tenant, key)]
  end

  def test_a_failed_commit_is_503_commit_failed
    handler, key = Handler.new(&paying { |_env, _attempt|
      ActiveRecord::Base.connection.execute("INSERT INTO rack_ar_guard VALUES (1), (1)")
      [201, {}, ["paid"]]
    }), fresh_key
    app = app_for(handler, :active_record, transactional: true)
    reply = post(app, tenant, key)
    assert_problem reply, 503, "commit-failed"
    assert_equal "1", reply.headers["Retry-After"]
    assert_equal [0, nil], [payments, Database.stored(tenant, key)]
    handler.answer = paying
    assert_equal 201, post(app, tenant, key).status # the connection is fine afterwards
  end

  def test_a_statement_that_failed_is_not_committed
    handler, key = Handler.new(&paying { |_env, _attempt|
      begin
        ActiveRecord::Base.connection.execute("SELECT 1/0")
      rescue ActiveRecord::StatementInvalid
        nil # swallowed: the transaction is aborted all the same
      end
      [201, {}, ["paid"]]
    }), fresh_key
    assert_problem post(app_for(handler, :active_record, transactional: true), tenant, key), 500, "store-failed"
    assert_equal [0, nil], [payments, Database.stored(tenant, key)]
  end

  def test_unreadable_json_restarts_the_transaction
    handler, key = Handler.new(&paying), fresh_key
    app = app_for(handler, :active_record, transactional: true)
    assert_equal 201, post(app, tenant, key, "{not json").status
    assert_equal "true", post(app, tenant, key, "{not json").headers["Idempotent-Replayed"]
    assert_equal 1, payments(key)
  end

  def test_unsettled_commits_the_writes_unfinished
    handler, key = Handler.new(&paying { |_env, attempt|
      attempt.leave_unsettled!
      [502, {}, ["maybe"]]
    }), fresh_key
    app = app_for(handler, :active_record, transactional: true)
    assert_equal 502, post(app, tenant, key).status
    assert_equal [1, "in_progress"], [payments(key), Database.stored(tenant, key)]
  end

  # Inside a transaction that is already open (a test's transactional fixtures), the key's work is a savepoint
  # of it: rolled back alone when the handler fails, and the outer transaction decides the rest.
  def test_inside_an_open_transaction
    ok = fresh_key
    handler = Handler.new(&paying)
    app = app_for(handler, :active_record, transactional: true)
    ActiveRecord::Base.transaction(joinable: false) do
      assert_equal 201, post(app, tenant, ok).status
      handler.answer = paying { raise "boom" }
      assert_raises(RuntimeError) { post(app, tenant, fresh_key) }
      handler.answer = paying
      assert_equal 201, post(app, tenant, fresh_key, "{not json").status # restart: back to the savepoint
      inside = ActiveRecord::Base.connection.select_value("SELECT count(*) FROM rack_ar_payments WHERE tenant = " \
                                                          "#{ActiveRecord::Base.connection.quote(tenant)}")
      assert_equal 2, inside.to_i
      default = app_for(Handler.new, :active_record)
      assert_equal 201, post(default, tenant, fresh_key).status # the default mode joins it
      raise ActiveRecord::Rollback
    end
    assert_equal [0, nil], [payments, Database.stored(tenant, ok)]
  end

  def test_store_unavailable
    handler = Handler.new
    [false, true].each do |transactional|
      reply = post(app_for(handler, Unreachable, transactional: transactional), tenant, fresh_key)
      assert_problem reply, 503, "store-unavailable"
    end
    assert_equal 0, handler.runs
  end
end
