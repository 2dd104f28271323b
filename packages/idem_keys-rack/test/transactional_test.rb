# frozen_string_literal: true

require_relative "test_helper"

# Transactional mode on a pool of PG::Connection: the claim, the handler's writes (on attempt.connection) and the
# stored answer commit together, once, or not at all. Most tests run on a pool of ONE connection: one left out of
# the pool or in a transaction would fail the next request, and every test ends checking they are all back, idle.
class TransactionalTest < Minitest::Test
  include Helpers

  def setup
    Database.exec("CREATE TABLE IF NOT EXISTS rack_tx_writes (tenant text NOT NULL, key text NOT NULL, " \
                  "outcome text NOT NULL)")
    Database.exec("CREATE TABLE IF NOT EXISTS rack_tx_guard (tenant text NOT NULL, n int NOT NULL, " \
                  "UNIQUE (tenant, n) DEFERRABLE INITIALLY DEFERRED)")
    @pool = TestPool.new(size: 1)
  end

  def teardown
    assert @pool.idle?, "a connection was left out of the pool, or in a transaction"
    @pool.close
  end

  def writes
    Database.exec("SELECT key, outcome FROM rack_tx_writes WHERE tenant = $1 ORDER BY key, outcome", [tenant]).values
  end

  # An answer that first writes one row on the middleware's connection, then answers `after` (201 "paid").
  def writing(&after)
    lambda do |env, attempt|
      conn = attempt.connection
      assert_equal PG::PQTRANS_INTRANS, conn.transaction_status
      conn.exec_params("INSERT INTO rack_tx_writes VALUES ($1, $2, $3)", [attempt.scope, attempt.key, attempt.outcome])
      after ? after.call(env, attempt) : [201, { "location" => "/pay/1" }, ["paid"]]
    end
  end

  def tx_app(handler, pool = @pool, **options)
    app_for(handler, pool, transactional: true, **options)
  end

  def test_one_commit_holds_the_write_and_the_answer
    seen_outside = []
    handler, key = Handler.new(&writing { |_env, attempt|
      # Another connection sees neither the write nor the claim until the one COMMIT.
      seen_outside << [writes, Database.stored(tenant, attempt.key)]
      [201, { "location" => "/pay/1" }, ["paid"]]
    }), fresh_key
    app = tx_app(handler)
    first = post(app, tenant, key)
    again = post(app, tenant, key)
    assert_equal [201, "paid", "claimed"], [first.status, first.body, first.headers["Idempotency-Outcome"]]
    assert_equal [201, "paid", "/pay/1", "true"],
                 [again.status, again.body, again.headers["Location"], again.headers["Idempotent-Replayed"]]
    assert_equal 1, handler.runs
    assert_equal [[[], nil]], seen_outside
    assert_nil handler.attempts.first.connection # once committed, the connection is the pool's again
    assert_equal [[key, "claimed"]], writes
  end

  def test_an_exception_rolls_back_the_write_and_frees_the_key
    handler, key = Handler.new(&writing { raise "boom after the write" }), fresh_key
    app = tx_app(handler)
    assert_raises(RuntimeError) { post(app, tenant, key) } # the exception goes on, as outside the mode
    assert_equal [], writes
    handler.answer = writing
    assert_equal [201, "claimed"], [post(app, tenant, key).status, handler.attempts.last.outcome]
    assert_equal [[key, "claimed"]], writes
  end

  def test_a_retryable_answer_rolls_back_and_frees_the_key
    [429, 503].each do |status|
      handler, key = Handler.new(&writing { [status, { "retry-after" => "1" }, ["later"]] }), fresh_key
      app = tx_app(handler)
      reply = post(app, tenant, key)
      assert_equal [status, "later"], [reply.status, reply.body]
      assert_nil Database.stored(tenant, key)
      assert_equal "claimed", post(app, tenant, key).headers["Idempotency-Outcome"]
    end
    assert_equal [], writes
  end

  def test_a_failed_commit_is_503_commit_failed_and_nothing_stays
    handler, key = Handler.new(&writing { |_env, attempt|
      # Deferred: the duplicate is refused by COMMIT, after the answer was stored in the transaction.
      attempt.connection.exec_params("INSERT INTO rack_tx_guard VALUES ($1, 1), ($1, 1)", [attempt.scope])
      [201, {}, ["paid"]]
    }), fresh_key
    log = StringIO.new
    app = tx_app(handler, log: log)
    reply = post(app, tenant, key)
    assert_problem reply, 503, "commit-failed"
    assert_equal ["1", "claimed"], [reply.headers["Retry-After"], reply.headers["Idempotency-Outcome"]]
    assert_match(/could not be committed/, log.string)
    assert_equal [], writes
    assert_nil Database.stored(tenant, key)
    handler.answer = writing
    assert_equal 201, post(app, tenant, key).status
  end

  def test_an_aborted_transaction_is_not_committed
    handler, key = Handler.new { |_env, attempt|
      attempt.leave_unsettled!
      begin
        attempt.connection.exec("SELECT 1/0")
      rescue PG::DivisionByZero
        nil # swallowed: the transaction is aborted all the same
      end
      [502, {}, ["maybe"]]
    }, fresh_key
    assert_problem post(tx_app(handler), tenant, key), 503, "commit-failed"
    assert_nil Database.stored(tenant, key)
  end

  def test_an_answer_that_cannot_be_stored_rolls_everything_back
    big = "x" * (1024 * 1024 + 1)
    handler, key = Handler.new(&writing { [200, {}, [big]] }), fresh_key
    app = tx_app(handler)
    assert_problem post(app, tenant, key), 500, "store-failed"
    assert_equal [], writes
    assert_nil Database.stored(tenant, key) # unlike the default mode, the key is free at once
    handler.answer = writing
    assert_equal 201, post(app, tenant, key).status
  end

  def test_unsettled_commits_the_write_and_the_claim_unfinished
    handler, key = Handler.new(&writing { |_env, attempt|
      attempt.leave_unsettled! unless attempt.recovered?
      [502, {}, [attempt.outcome]]
    }), fresh_key
    app = tx_app(handler, lease: 1)
    assert_equal [502, "claimed"], [post(app, tenant, key).status, handler.attempts.last.outcome]
    assert_equal "in_progress", Database.stored(tenant, key)
    assert_problem post(app, tenant, key), 409, "request-in-progress"
    sleep 1.2
    reply = post(app, tenant, key)
    assert_equal [502, "recovered"], [reply.status, reply.body]
    assert_equal [[key, "claimed"], [key, "recovered"]], writes
  end

  def test_unsettled_wins_over_an_exception
    handler, key = Handler.new(&writing { |_env, attempt|
      attempt.leave_unsettled!
      raise "lost the provider's answer"
    }), fresh_key
    app = tx_app(handler)
    assert_raises(RuntimeError) { post(app, tenant, key) }
    assert_equal [[key, "claimed"]], writes
    assert_problem post(app, tenant, key), 409, "request-in-progress"
  end

  def test_a_duplicate_while_the_first_transaction_is_open_is_409_at_once
    two = TestPool.new(size: 2)
    release = Queue.new
    handler, key = Handler.new(&writing { release.pop; [201, {}, ["first"]] }), fresh_key
    app = tx_app(handler, two)
    first = later { post(app, tenant, key) }
    sleep 0.01 until handler.runs == 1
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    busy = post(app, tenant, key)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 1.0
    assert_problem busy, 409, "request-in-progress"
    assert_equal "1", busy.headers["Retry-After"]
    release << :go
    assert_equal "first", first.value.body
    assert_equal "first", post(app, tenant, key).body
    assert two.idle?
    two.close
  end

  def test_a_duplicate_that_waits_gets_the_first_answer
    two = TestPool.new(size: 2)
    handler, key = Handler.new(&writing { sleep 0.5; [201, {}, ["first"]] }), fresh_key
    app = tx_app(handler, two, wait: 5)
    first = later { post(app, tenant, key) }
    sleep 0.01 until handler.runs == 1
    waited = post(app, tenant, key)
    assert_equal ["first", "true"], [waited.body, waited.headers["Idempotent-Replayed"]]
    assert_equal "first", first.value.body
    assert_equal 1, handler.runs
    assert two.idle?
    two.close
  end

  def test_unreadable_json_restarts_the_transaction_and_claims_by_bytes
    handler, key = Handler.new(&writing), fresh_key
    app = tx_app(handler)
    assert_equal 201, post(app, tenant, key, "{not json").status
    assert_equal "true", post(app, tenant, key, "{not json").headers["Idempotent-Replayed"]
    assert_problem post(app, tenant, key, "{not  json"), 422, "key-reused"
    assert_equal [[key, "claimed"]], writes
  end

  def test_a_handler_that_commits_itself_is_not_stored
    handler, key = Handler.new(&writing { |_env, attempt|
      attempt.connection.exec("COMMIT")
      [201, {}, ["paid"]]
    }), fresh_key
    log = StringIO.new
    assert_problem post(tx_app(handler, log: log), tenant, key), 500, "store-failed"
    assert_match(/ended the middleware's transaction itself/, log.string)
  end

  def test_savepoints_are_the_handlers
    handler, key = Handler.new(&writing { |_env, attempt|
      conn = attempt.connection
      conn.exec("SAVEPOINT mine")
      begin
        conn.exec("SELECT 1/0")
      rescue PG::DivisionByZero
        conn.exec("ROLLBACK TO SAVEPOINT mine")
      end
      [201, {}, ["paid"]]
    }), fresh_key
    assert_equal 201, post(tx_app(handler), tenant, key).status
    assert_equal "replay", Database.stored(tenant, key)
    assert_equal [[key, "claimed"]], writes
  end

  def test_per_route
    handler = Handler.new { |_env, attempt| [201, {}, [attempt.connection ? "in a transaction" : "alone"]] }
    app = app_for(handler, @pool, transactional: ->(env) { env["PATH_INFO"].start_with?("/tx") })
    assert_equal "in a transaction", post(app, tenant, fresh_key, path: "/tx/pay").body
    assert_equal "alone", post(app, tenant, fresh_key, path: "/pay").body
  end

  def test_a_lost_connection_is_commit_failed_and_replaced
    handler, key = Handler.new(&writing { |_env, attempt|
      pid = attempt.connection.backend_pid
      Database.exec("SELECT pg_terminate_backend($1)", [pid])
      sleep 0.1
      [201, {}, ["paid"]]
    }), fresh_key
    app = tx_app(handler, log: StringIO.new)
    assert_problem post(app, tenant, key), 500, "store-failed" # the finish meets the closed connection
    assert_equal [], writes
    handler.answer = writing
    assert_equal 201, post(app, tenant, key).status # the connection was reset, not handed out broken
  end

  def test_store_unavailable
    nowhere = ->(&_block) { raise PG::ConnectionBad, "connection refused" }
    handler = Handler.new
    assert_problem post(tx_app(handler, nowhere), tenant, fresh_key), 503, "store-unavailable"
    assert_equal 0, handler.runs
  end

  def test_replays_and_duplicates_roll_back_the_claims_transaction
    handler, key = Handler.new(&writing), fresh_key
    app = tx_app(handler)
    post(app, tenant, key)
    assert_equal "true", post(app, tenant, key).headers["Idempotent-Replayed"]
    assert_problem post(app, tenant, key, "{}"), 422, "key-reused"
    assert_equal 1, handler.runs
  end
end
