# frozen_string_literal: true

require_relative "test_helper"

# A pool of PG::Connection comes back by itself, in both modes: after its sessions end under it (a restart, a
# failover; here pg_terminate_backend of the pool's own sessions, by their application_name), and after an
# interrupt (Rack::Timeout) lands in the middle of a statement. No connection is handed out broken twice, and none
# goes back to the pool in a transaction.
class RecoveryTest < Minitest::Test
  include Helpers

  # New keys after the sessions ended, until one is answered 201; then every one must be.
  ATTEMPTS = 3
  AFTERWARDS = 4

  def setup
    Database.exec("CREATE TABLE IF NOT EXISTS rack_recovery_writes (tenant text NOT NULL, key text NOT NULL)")
    Database.commit_effects!
    @name = session_name("pg")
    @pools = []
  end

  def teardown
    @pools.each do |pool|
      assert pool.idle?, "a connection was left out of the pool, or in a transaction"
      pool.close
    end
  end

  def pool(size)
    TestPool.new(size: size, application_name: @name).tap { |p| @pools << p }
  end

  def writes(key)
    Database.exec("SELECT count(*) FROM rack_recovery_writes WHERE tenant = $1 AND key = $2", [tenant, key])
            .getvalue(0, 0).to_i
  end

  # Writes one row, then answers 201: on attempt.connection in transactional mode; otherwise on the test's own
  # connection, so that what comes back (or not) is the middleware's use of the pool alone.
  def writing
    lambda do |_env, attempt|
      (attempt.connection || Database.conn).exec_params("INSERT INTO rack_recovery_writes VALUES ($1, $2)",
                                                        [attempt.scope, attempt.key])
      [201, {}, ["paid"]]
    end
  end

  def assert_comes_back(transactional)
    two = pool(2)
    app = app_for(Handler.new(&writing), two, transactional: transactional)
    2.times { assert_equal 201, post(app, tenant, fresh_key).status }
    assert_equal 2, Database.terminate(@name)
    statuses = []
    ATTEMPTS.times do
      key = fresh_key
      statuses << post(app, tenant, key).status
      assert_equal statuses.last == 201 ? 1 : 0, writes(key), "#{key} answered #{statuses.last}"
      break if statuses.last == 201
    end
    assert_equal 201, statuses.last, "no 201 in #{ATTEMPTS} new keys after the sessions ended: #{statuses}"
    AFTERWARDS.times do
      key = fresh_key
      assert_equal [201, 1], [post(app, tenant, key).status, writes(key)]
    end
  end

  def test_sessions_ended_under_the_pool_come_back
    assert_comes_back(false)
  end

  def test_sessions_ended_under_the_pool_come_back_in_transactional_mode
    assert_comes_back(true)
  end

  # The duplicate waits inside idem_claim (wait:) for the first attempt, on the pool's one connection, when the
  # interrupt lands: the connection goes back mid-statement, and the first attempt's finish needs it.
  def test_an_interrupt_inside_a_claim_leaves_the_connection_usable
    one = pool(1)
    release = Queue.new
    handler = Handler.new { |_env, _attempt| release.pop; [201, {}, ["first"]] }
    app, key = app_for(handler, one, wait: 60), fresh_key
    first = later { post(app, tenant, key) }
    wait_until("the first attempt runs") { handler.runs == 1 }
    duplicate = later { post(app, tenant, key) }
    Database.wait_until_running(@name, "%idem_claim%")
    duplicate.raise(RequestTimeout, "the request ran out of time")
    assert_raises(RequestTimeout) { duplicate.value }
    release.close # the first attempt goes on (and later ones do not wait)
    assert_equal [201, "first"], [first.value.status, first.value.body] # its finish got a usable connection
    assert_equal "first", post(app, tenant, key).body
    assert_equal 201, post(app, tenant, fresh_key).status
  end

  # An interrupt while COMMIT runs (here held up by a deferred trigger): the client-side timeout leaves the
  # outcome unknown, the connection is reset (its COMMIT cancelled), and the retry with the key learns which.
  def test_an_interrupt_during_commit_is_commit_unknown
    one = pool(1)
    handler = Handler.new do |_env, attempt|
      effect = handler.runs == 1 ? "sleep" : "none"
      attempt.connection.exec_params("INSERT INTO rack_commit_effects VALUES ($1, $2, $3)",
                                     [attempt.scope, attempt.key, effect])
      [201, {}, ["paid"]]
    end
    log = StringIO.new
    app, key = app_for(handler, one, transactional: true, log: log), fresh_key
    request = later { post(app, tenant, key) }
    Database.wait_until_running(@name, "COMMIT")
    request.raise(RequestTimeout, "the request ran out of time")
    reply = request.value
    assert_problem reply, 503, "commit-unknown"
    assert_equal ["1", "claimed"], [reply.headers["Retry-After"], reply.headers["Idempotency-Outcome"]]
    assert_match(/outcome of the COMMIT is unknown/, log.string)
    # The cancelled COMMIT committed nothing: the retry runs afresh.
    again = post(app, tenant, key)
    assert_equal [201, "claimed", nil], [again.status, again.headers["Idempotency-Outcome"],
                                          again.headers["Idempotent-Replayed"]]
    assert_equal 1, Database.commit_effects(tenant, key)
    assert_equal 201, post(app, tenant, fresh_key).status
  end

  # An interrupt in the handler while its statement runs on attempt.connection: the statement is cancelled, not
  # waited for (it would hold the connection and its locks for two minutes), and everything is rolled back.
  def test_an_interrupt_in_the_handlers_statement_is_cancelled_and_rolled_back
    one = pool(1)
    handler = Handler.new do |_env, attempt|
      attempt.connection.exec_params("INSERT INTO rack_recovery_writes VALUES ($1, $2)", [attempt.scope, attempt.key])
      attempt.connection.exec("SELECT pg_sleep(120)") if handler.runs == 1
      [201, {}, ["paid"]]
    end
    app, key = app_for(handler, one, transactional: true), fresh_key
    request = later { post(app, tenant, key) }
    Database.wait_until_running(@name, "SELECT pg_sleep(120)")
    request.raise(RequestTimeout, "the request ran out of time")
    assert_raises(RequestTimeout) do # join raises what ended the thread
      flunk("the interrupted request waits for its statement to end") unless request.join(20)
    end
    assert_equal [0, nil], [writes(key), Database.stored(tenant, key)]
    assert_equal [201, "claimed"], [post(app, tenant, key).status, handler.attempts.last.outcome]
    assert_equal 1, writes(key)
  end

  # The COMMIT ends the session (FATAL 57P01 in place of its answer): the outcome is unknown to the middleware,
  # the retry with the key finds nothing committed and runs afresh, and the pool's one connection was reset.
  def test_a_commit_whose_answer_is_lost_is_commit_unknown
    one = pool(1)
    handler = Handler.new do |_env, attempt|
      effect = handler.runs == 1 ? "terminate" : "none"
      attempt.connection.exec_params("INSERT INTO rack_commit_effects VALUES ($1, $2, $3)",
                                     [attempt.scope, attempt.key, effect])
      [201, {}, ["paid"]]
    end
    log = StringIO.new
    app, key = app_for(handler, one, transactional: true, log: log), fresh_key
    lost = post(app, tenant, key)
    assert_problem lost, 503, "commit-unknown"
    assert_equal ["1", "claimed"], [lost.headers["Retry-After"], lost.headers["Idempotency-Outcome"]]
    assert_match(/outcome of the COMMIT is unknown.*retry with the same Idempotency-Key/m, log.string)
    assert_equal [0, nil], [Database.commit_effects(tenant, key), Database.stored(tenant, key)]
    again = post(app, tenant, key)
    assert_equal [201, "claimed", nil], [again.status, again.headers["Idempotency-Outcome"],
                                          again.headers["Idempotent-Replayed"]]
    assert_equal [1, "replay"], [Database.commit_effects(tenant, key), Database.stored(tenant, key)]
    assert_equal 201, post(app, tenant, fresh_key).status
  end
end
