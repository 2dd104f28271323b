# frozen_string_literal: true

require_relative "active_record_helper"

# Models on a pool of their own, whose sessions carry an application_name the tests end them by.
class RackKillableRecord < ActiveRecord::Base
  self.abstract_class = true
  SESSIONS = "idem-rack-test-ar-#{SecureRandom.hex(4)}"
  # One connection: a request after an interrupted one gets the very connection the interrupt left.
  establish_connection(url: DATABASE_URL, application_name: SESSIONS, pool: 1)
end

class RackKillablePayment < RackKillableRecord
  self.table_name = "rack_ar_payments"
end

# pool: an ActiveRecord class, in both modes, after its sessions end under it (a restart, a failover; here
# pg_terminate_backend of its own sessions) and after a COMMIT whose answer is lost: the connection comes back,
# whether ActiveRecord checks it out for each request (as Rails does) or the thread holds it across requests (a
# plain Rack app that never gives it back), and new keys are answered 201 again.
class ActiveRecordRecoveryTest < Minitest::Test
  include ActiveRecordHelpers

  ATTEMPTS = 3
  AFTERWARDS = 4

  def setup
    create_tables
    Database.commit_effects!
  end

  def teardown
    assert_pool_idle(RackKillableRecord)
  end

  def paying(&effect)
    lambda do |_env, attempt|
      RackKillablePayment.create!(tenant: attempt.scope, idempotency_key: attempt.key, amount: 1000)
      effect&.call(attempt)
      [201, {}, ["paid"]]
    end
  end

  # Two requests, the sessions end, then new keys until one is 201 (each answered key with exactly its payment),
  # then every one is. held: the thread keeps its connection between requests; otherwise it gives it back after
  # each, as Rails' executor does, and ActiveRecord checks it out (and verifies it) again for the next.
  def assert_comes_back(transactional, held:)
    app = app_for(Handler.new(&paying), RackKillableRecord, transactional: transactional)
    pay = lambda do |key|
      post(app, tenant, key).status.tap { RackKillableRecord.connection_pool.release_connection unless held }
    end
    RackKillableRecord.connection if held # checked out for this thread until teardown
    2.times { assert_equal 201, pay.call(fresh_key) }
    assert_equal 1, Database.terminate(RackKillableRecord::SESSIONS)
    statuses = []
    ATTEMPTS.times do
      key = fresh_key
      statuses << pay.call(key)
      assert_equal statuses.last == 201 ? 1 : 0, payments(key), "#{key} answered #{statuses.last}"
      break if statuses.last == 201
    end
    assert_equal 201, statuses.last, "no 201 in #{ATTEMPTS} new keys after the sessions ended: #{statuses}"
    AFTERWARDS.times do
      key = fresh_key
      assert_equal [201, 1], [pay.call(key), payments(key)]
    end
  end

  def test_sessions_ended_under_the_pool_come_back
    assert_comes_back(false, held: false)
  end

  def test_sessions_ended_under_the_pool_come_back_in_transactional_mode
    assert_comes_back(true, held: false)
  end

  def test_a_connection_the_thread_holds_comes_back
    assert_comes_back(false, held: true)
  end

  def test_a_connection_the_thread_holds_comes_back_in_transactional_mode
    assert_comes_back(true, held: true)
  end

  # The COMMIT ends the session (FATAL 57P01 in place of its answer): unknown to the middleware; the retry with
  # the key finds nothing committed and runs afresh, with one payment.
  def test_a_commit_whose_answer_is_lost_is_commit_unknown
    runs = 0
    handler = Handler.new(&paying { |attempt|
      runs += 1
      RackKillableRecord.connection.exec_query("INSERT INTO rack_commit_effects VALUES ($1, $2, $3)", "effect",
                                               [attempt.scope, attempt.key, runs == 1 ? "terminate" : "none"])
    })
    log = StringIO.new
    app, key = app_for(handler, RackKillableRecord, transactional: true, log: log), fresh_key
    lost = post(app, tenant, key)
    assert_problem lost, 503, "commit-unknown"
    assert_equal ["1", "claimed"], [lost.headers["Retry-After"], lost.headers["Idempotency-Outcome"]]
    assert_match(/outcome of the COMMIT is unknown/, log.string)
    assert_equal [0, nil], [payments(key), Database.stored(tenant, key)]
    again = post(app, tenant, key)
    assert_equal [201, "claimed", nil], [again.status, again.headers["Idempotency-Outcome"],
                                          again.headers["Idempotent-Replayed"]]
    assert_equal [1, "replay"], [payments(key), Database.stored(tenant, key)]
    assert_equal 201, post(app, tenant, fresh_key).status
  end

  # An interrupt while COMMIT runs (here held up by a deferred trigger), the twin of RecoveryTest's: ActiveRecord
  # answers an exception in its COMMIT with a ROLLBACK, which would first wait for the COMMIT to end. The COMMIT
  # is cancelled instead, the client told its outcome is unknown, and the retry with the key learns which.
  def test_an_interrupt_during_commit_is_commit_unknown
    runs = 0
    handler = Handler.new(&paying { |attempt|
      runs += 1
      RackKillableRecord.connection.exec_query("INSERT INTO rack_commit_effects VALUES ($1, $2, $3)", "effect",
                                               [attempt.scope, attempt.key, runs == 1 ? "sleep" : "none"])
    })
    log = StringIO.new
    app, key = app_for(handler, RackKillableRecord, transactional: true, log: log), fresh_key
    request = later { post(app, tenant, key) }
    Database.wait_until_running(RackKillableRecord::SESSIONS, "COMMIT")
    request.raise(RequestTimeout, "the request ran out of time")
    answered = request.join(20)
    # Failing, the thread would hold the pool's one connection for two minutes: its session is ended first.
    Database.terminate(RackKillableRecord::SESSIONS) unless answered
    assert answered, "the interrupted request waited for its COMMIT to end"
    reply = request.value
    assert_problem reply, 503, "commit-unknown"
    assert_equal ["1", "claimed"], [reply.headers["Retry-After"], reply.headers["Idempotency-Outcome"]]
    assert_match(/outcome of the COMMIT is unknown/, log.string)
    # The cancelled COMMIT committed nothing: the retry runs afresh, with one payment.
    assert_equal [0, nil], [payments(key), Database.stored(tenant, key)]
    again = post(app, tenant, key)
    assert_equal [201, "claimed", nil], [again.status, again.headers["Idempotency-Outcome"],
                                          again.headers["Idempotent-Replayed"]]
    assert_equal [1, "replay"], [payments(key), Database.stored(tenant, key)]
    assert_equal 201, post(app, tenant, fresh_key).status
  end

  # Interrupted inside the claim (waiting there for the first attempt) while the thread holds its connection:
  # the next request on that connection is answered, without waiting out the interrupted statement.
  def test_an_interrupt_inside_a_claim_leaves_the_connection_usable
    release = Queue.new
    handler = Handler.new { |_env, _attempt| release.pop; [201, {}, ["first"]] }
    app, key = app_for(handler, RackKillableRecord, wait: 60), fresh_key
    first = later { post(app, tenant, key) }
    wait_until("the first attempt runs") { handler.runs == 1 }
    duplicate = later do
      RackKillableRecord.connection # held by this thread, as a plain Rack app's thread holds it
      post(app, tenant, key)
    ensure
      RackKillableRecord.connection_pool.release_connection
    end
    Database.wait_until_running(RackKillableRecord::SESSIONS, "%idem_claim%")
    duplicate.raise(RequestTimeout, "the request ran out of time")
    assert_raises(RequestTimeout) { duplicate.value }
    release.close # the first attempt goes on (and later ones do not wait)
    # Its finish gets the one connection: at once, not once the interrupted claim's 60 s wait has run out.
    refute_nil first.join(20), "the first attempt's finish waited for the interrupted claim"
    assert_equal [201, "first"], [first.value.status, first.value.body]
    assert_equal "first", post(app, tenant, key).body
    assert_equal 201, post(app, tenant, fresh_key).status
  end
end
