# frozen_string_literal: true

require_relative "test_helper"

# Every behaviour row of docs/integrations.md in the default mode (claim, handler and answer each commit on their
# own), on a pool of PG::Connection, against $DATABASE_URL.
class MiddlewareTest < Minitest::Test
  include Helpers

  def setup
    @pool = TestPool.new(size: 4)
  end

  def teardown
    assert @pool.idle?, "a connection was left out of the pool, or in a transaction"
    @pool.close
  end

  def test_claim_then_replay_byte_for_byte
    handler = Handler.new do |_env, _attempt|
      [201, { "content-type" => "application/json", "location" => "/pay/1", "x-trace" => "t1" }, ['{"id": 1', "}"]]
    end
    app, key = app_for(handler, @pool), fresh_key
    first = post(app, tenant, key)
    again = post(app, tenant, key)
    assert_equal [201, '{"id": 1}', "claimed"], [first.status, first.body, first.headers["Idempotency-Outcome"]]
    assert_nil first.headers["Idempotent-Replayed"]
    assert_equal [201, '{"id": 1}', "true", "replay"],
                 [again.status, again.body, again.headers["Idempotent-Replayed"], again.headers["Idempotency-Outcome"]]
    assert_equal "/pay/1", again.headers["Location"]
    assert_equal "application/json", again.headers["Content-Type"]
    assert_equal "9", again.headers["Content-Length"]
    assert_nil again.headers["X-Trace"], "a header off the allow-list was replayed"
    assert_equal 1, handler.runs
    attempt = handler.attempts.first
    assert_equal [tenant, key, "claimed", false], [attempt.scope, attempt.key, attempt.outcome, attempt.recovered?]
    assert_kind_of Integer, attempt.token
    assert_nil attempt.connection
  end

  # Beyond contract/fingerprints.json (ContractTest): a media type's parameters do not change how the body counts.
  def test_a_json_media_type_with_parameters_counts_as_json
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool)
    post(app, tenant, key, '{"amount": 1000, "currency": "EUR"}')
    again = post(app, tenant, key, %({ "currency":"EUR",\n "amount":1000.0 }),
                 type: "application/merchant+json; charset=utf-8")
    assert_equal "true", again.headers["Idempotent-Replayed"]
    assert_equal 1, handler.runs
  end

  # Beyond the contract's vectors: another content type, the outcome header of a mismatch.
  def test_key_reused_with_another_content_type
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool)
    post(app, tenant, key)
    reused = post(app, tenant, key, type: "text/plain")
    assert_problem reused, 422, "key-reused"
    assert_equal "mismatch", reused.headers["Idempotency-Outcome"]
    assert_equal 1, handler.runs
  end

  # Beyond the contract's vectors: a JSON body that is not UTF-8 counts by its bytes.
  def test_json_that_is_not_utf8_counts_by_its_bytes
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool)
    type = "application/problem+json"
    assert_equal 201, post(app, tenant, key, "caf\xE9".b, type: type).status
    assert_equal "true", post(app, tenant, key, "caf\xE9".b, type: type).headers["Idempotent-Replayed"]
    assert_problem post(app, tenant, key, "caf\xC3\xA9", type: type), 422, "key-reused"
    assert_equal 1, handler.runs
  end

  def test_tenants_do_not_share_keys
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool)
    post(app, tenant, key)
    other = post(app, "#{tenant}-other", key)
    assert_equal [201, nil], [other.status, other.headers["Idempotent-Replayed"]]
    assert_equal 2, handler.runs
  end

  def test_key_missing
    handler = Handler.new
    assert_problem post(app_for(handler, @pool), tenant, nil), 400, "key-missing"
    reply = post(app_for(handler, @pool, required: false), tenant, nil)
    assert_equal 201, reply.status
    assert_equal [nil], handler.attempts # passed without idempotency
  end

  def test_key_malformed_whatever_required_says
    handler = Handler.new
    [true, false].each do |required|
      app = app_for(handler, @pool, required: required)
      # The contract's malformed values, as a server hands them over (bytes), but those with a control character,
      # which no HTTP server does.
      Contract.load("keys")["cases"].select { |c| c["key"].nil? && !c["value"].match?(/[\x00-\x1f\x7f]/) }
              .each { |c| assert_problem post(app, tenant, c["value"].b), 400, "key-malformed" }
    end
    assert_equal 0, handler.runs
  end

  def test_a_body_over_the_limit_is_refused_unclaimed
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool, max_body_bytes: 64)
    assert_problem post(app, tenant, key, "x" * 65, type: "text/plain"), 413, "body-too-large"
    # Without a Content-Length (a chunked request) the limit holds as the body is read.
    assert_problem post(app, tenant, key, "x" * 65, type: "text/plain", headers: { "CONTENT_LENGTH" => nil }), 413,
                   "body-too-large"
    assert_equal 201, post(app, tenant, key, "x" * 64, type: "text/plain").status
    assert_equal ["x" * 64], handler.bodies
  end

  def test_other_methods_pass_untouched
    handler = Handler.new { |_env, _attempt| [200, { "content-type" => "text/plain" }, ["seen"]] }
    app = app_for(handler, @pool)
    reply = post(app, tenant, "not a valid key", "", method: "GET", type: nil)
    assert_equal [200, "seen", nil], [reply.status, reply.body, reply.headers["Idempotency-Outcome"]]
    put = post(app_for(handler, @pool, methods: %w[put]), tenant, fresh_key, method: "PUT")
    assert_equal "claimed", put.headers["Idempotency-Outcome"]
    assert_nil handler.attempts.first # the GET ran without a claim
    assert_equal "claimed", handler.attempts.last.outcome
  end

  # The app gets the body the middleware read as a rewindable rack.input of its own (Rack 3's Lint would hide
  # rewind from the app, which Rack 3 no longer promises: this handler sees the env as the middleware hands it).
  def test_the_body_reaches_the_app_whole_and_rewindable
    seen = []
    handler = Handler.new do |env, _attempt|
      env["rack.input"].rewind
      seen << env["rack.input"].read << env["CONTENT_LENGTH"]
      [201, {}, []]
    end
    post(linted_outside(handler, pool: @pool), tenant, fresh_key, BODY, headers: { "CONTENT_LENGTH" => nil })
    assert_equal [BODY], handler.bodies
    assert_equal [BODY, BODY.bytesize.to_s], seen
  end

  def test_scope_missing
    handler = Handler.new
    log = StringIO.new
    assert_problem post(app_for(handler, @pool, log: log), nil, fresh_key), 500, "scope-missing"
    assert_problem post(app_for(handler, @pool), "", fresh_key), 500, "scope-missing"
    assert_match(/gave no scope/, log.string)
    assert_equal 0, handler.runs
    wrong = linted(handler, pool: @pool, scope: ->(_env) { 42 })
    assert_raises(TypeError) { post(wrong, tenant, fresh_key) }
  end

  def test_store_unavailable
    handler = Handler.new
    nowhere = ->(&_block) { raise PG::ConnectionBad, "connection refused" }
    exhausted = TestPool.new(size: 1, timeout: 0.2)
    exhausted.with do
      [nowhere, exhausted].each do |pool|
        reply = post(app_for(handler, pool), tenant, fresh_key)
        assert_problem reply, 503, "store-unavailable"
        assert_equal "1", reply.headers["Retry-After"]
      end
    end
    assert_equal 0, handler.runs
    exhausted.close
  end

  def test_a_connection_given_back_in_a_transaction_is_refused
    pool = TestPool.new(size: 1)
    pool.with { |conn| conn.exec("BEGIN") }
    log = StringIO.new
    assert_problem post(app_for(Handler.new, pool, log: log), tenant, fresh_key), 503, "store-unavailable"
    assert_match(/inside a transaction/, log.string)
    pool.with { |conn| conn.exec("ROLLBACK") }
    pool.close
  end

  def test_in_progress
    release = Queue.new
    handler = Handler.new do |_env, _attempt|
      release.pop
      [201, {}, ["first"]]
    end
    app, key = app_for(handler, @pool), fresh_key
    first = later { post(app, tenant, key) }
    sleep 0.01 until handler.runs == 1
    busy = post(app, tenant, key)
    assert_problem busy, 409, "request-in-progress"
    assert_operator busy.headers["Retry-After"].to_i, :>=, 1
    assert_equal "in_progress", busy.headers["Idempotency-Outcome"]
    release << :go
    assert_equal "first", first.value.body
    assert_equal "first", post(app, tenant, key).body
    assert_equal 1, handler.runs
  end

  def test_wait_gets_the_first_answer
    handler = Handler.new do |_env, _attempt|
      sleep 0.5
      [201, {}, ["first"]]
    end
    app, key = app_for(handler, @pool, wait: 5), fresh_key
    first = later { post(app, tenant, key) }
    sleep 0.01 until handler.runs == 1
    waited = post(app, tenant, key)
    assert_equal ["first", "true"], [waited.body, waited.headers["Idempotent-Replayed"]]
    assert_equal "first", first.value.body
  end

  def test_retryable_answers_release
    [429, 503].each do |status|
      handler, key = Handler.new { |_env, _attempt| [status, { "retry-after" => "1" }, ["later"]] }, fresh_key
      app = app_for(handler, @pool)
      reply = post(app, tenant, key)
      assert_equal [status, "1", "claimed"],
                   [reply.status, reply.headers["Retry-After"], reply.headers["Idempotency-Outcome"]]
      handler.answer = ->(_env, _attempt) { [201, {}, ["ok"]] }
      again = post(app, tenant, key, '{"another": "body"}')
      assert_equal [201, "claimed"], [again.status, again.headers["Idempotency-Outcome"]]
    end
    handler, key = Handler.new { |_env, _attempt| [502, {}, ["bad gateway"]] }, fresh_key
    app = app_for(handler, @pool, retryable_statuses: [502])
    post(app, tenant, key)
    assert_equal "claimed", post(app, tenant, key).headers["Idempotency-Outcome"]
    assert_equal 2, handler.runs
  end

  def test_other_answers_are_stored
    [400, 402, 409, 500].each do |status|
      handler = Handler.new { |_env, _attempt| [status, { "content-type" => "application/problem+json" }, ["no"]] }
      key = fresh_key
      app = app_for(handler, @pool)
      post(app, tenant, key)
      again = post(app, tenant, key)
      assert_equal [status, "no", "true"], [again.status, again.body, again.headers["Idempotent-Replayed"]]
      assert_equal "application/problem+json", again.headers["Content-Type"]
      assert_equal 1, handler.runs
    end
  end

  def test_an_empty_answer_is_stored
    handler, key = Handler.new { |_env, _attempt| [204, {}, []] }, fresh_key
    app = app_for(handler, @pool)
    post(app, tenant, key)
    again = post(app, tenant, key)
    assert_equal [204, "", "true", nil],
                 [again.status, again.body, again.headers["Idempotent-Replayed"], again.headers["Content-Length"]]
    assert_equal 1, handler.runs
  end

  def test_an_exception_releases_the_key_and_goes_on
    handler, key = Handler.new { |_env, _attempt| raise "boom" }, fresh_key
    app = app_for(handler, @pool)
    assert_raises(RuntimeError) { post(app, tenant, key) }
    handler.answer = ->(_env, _attempt) { [201, {}, ["ok"]] }
    assert_equal "claimed", post(app, tenant, key).headers["Idempotency-Outcome"]
    assert_equal 2, handler.runs
  end

  def test_an_exception_while_the_body_is_read_releases_the_key
    broken = Object.new
    def broken.each
      yield "part"
      raise IOError, "the stream broke"
    end
    closed = []
    broken.define_singleton_method(:close) { closed << true }
    handler, key = Handler.new { |_env, _attempt| [200, {}, broken] }, fresh_key
    app = linted(handler, pool: @pool)
    assert_raises(IOError) { post(app, tenant, key) }
    assert_equal [true], closed
    assert_nil Database.stored(tenant, key)
  end

  def test_leave_unsettled_then_recovered
    handler, key = Handler.new { |_env, attempt|
      attempt.leave_unsettled! unless attempt.recovered?
      [502, {}, [attempt.outcome]]
    }, fresh_key
    app = app_for(handler, @pool, lease: 1)
    first = post(app, tenant, key)
    assert_equal [502, "claimed"], [first.status, first.body]
    assert_problem post(app, tenant, key), 409, "request-in-progress"
    sleep 1.2
    recovered = post(app, tenant, key)
    assert_equal [502, "recovered", "recovered"],
                 [recovered.status, recovered.body, recovered.headers["Idempotency-Outcome"]]
    assert handler.attempts.last.recovered?
    assert_equal "replay", Database.stored(tenant, key) # the recovered attempt's 502 is stored
  end

  def test_unsettled_wins_over_an_exception
    handler, key = Handler.new { |_env, attempt|
      attempt.leave_unsettled!
      raise "lost the provider's answer"
    }, fresh_key
    app = app_for(handler, @pool)
    assert_raises(RuntimeError) { post(app, tenant, key) }
    assert_problem post(app, tenant, key), 409, "request-in-progress"
  end

  def test_a_late_finish_is_fenced
    second_done = Queue.new
    handler = Handler.new do |_env, attempt|
      if attempt.recovered?
        [201, {}, ["second"]]
      else
        second_done.pop
        [201, {}, ["first"]]
      end
    end
    log = StringIO.new
    app, key = app_for(handler, @pool, lease: 1, log: log), fresh_key
    late = later { post(app, tenant, key) }
    sleep 1.2
    taker = post(app, tenant, key)
    second_done << :go
    late_reply = late.value
    assert_equal ["second", "recovered"], [taker.body, taker.headers["Idempotency-Outcome"]]
    assert_problem late_reply, 409, "lease-lost"
    assert_equal "1", late_reply.headers["Retry-After"]
    assert_match(/lease lost/, log.string)
    assert_equal "second", post(app, tenant, key).body
  end

  def test_a_dead_owners_key_is_recovered
    key = fresh_key
    # The dead owner's claim, with the fingerprint the middleware builds.
    Database.exec("SELECT idem_claim($1, $2, jsonb_build_object('method', 'POST'::text, 'target', '/pay'::text, " \
                  "'body', $3::jsonb), lease => '1s')", [tenant, key, BODY])
    handler = Handler.new
    app = app_for(handler, @pool)
    assert_problem post(app, tenant, key), 409, "request-in-progress"
    sleep 1.2
    assert_equal [201, "recovered"], [post(app, tenant, key).status, handler.attempts.last.outcome]
  end

  def test_an_answer_too_large_to_store
    big = "x" * (1024 * 1024 + 1) # over idem_keys.max_response_bytes' default of 1MB
    handler, key = Handler.new { |_env, _attempt| [200, {}, [big]] }, fresh_key
    log = StringIO.new
    app = app_for(handler, @pool, log: log)
    reply = post(app, tenant, key)
    assert_problem reply, 500, "store-failed"
    assert_equal "claimed", reply.headers["Idempotency-Outcome"]
    assert_match(/could not be stored/, log.string)
    assert_problem post(app, tenant, key), 409, "request-in-progress" # left claimed until its lease ends
  end

  def test_stored_headers
    # Two link fields: an Array on Rack 3, joined with "\n" on Rack 2.
    links = RACK3 ? ["</a>; rel=a", "</b>; rel=b"] : "</a>; rel=a\n</b>; rel=b"
    handler = Handler.new do |_env, _attempt|
      [201, { "x-trace" => "t1", "etag" => '"v1"', "link" => links, "content-type" => "text/csv" }, ["ok"]]
    end
    key = fresh_key
    app = app_for(handler, @pool)
    post(app, tenant, key)
    default = post(app, tenant, key)
    assert_equal ["</a>; rel=a, </b>; rel=b", '"v1"', nil, "text/csv"],
                 %w[Link ETag X-Trace Content-Type].map { |name| default.headers[name] }
    key = fresh_key
    app = app_for(handler, @pool, stored_headers: ["x-TRACE"])
    post(app, tenant, key)
    custom = post(app, tenant, key)
    assert_equal ["t1", nil], [custom.headers["x-TRACE"], custom.headers["ETag"]]
    stored = Database.exec("SELECT (idem_lookup($1, $2)).headers", [tenant, key]).getvalue(0, 0)
    assert_equal({ "x-TRACE" => "t1" }, JSON.parse(stored))
  end

  def test_a_proc_pool
    handler, key = Handler.new, fresh_key
    app = app_for(handler, ->(&block) { @pool.with(&block) })
    post(app, tenant, key)
    assert_equal "true", post(app, tenant, key).headers["Idempotent-Replayed"]
  end

  def test_hijacking_is_hidden_from_the_app
    seen = nil
    handler = Handler.new do |env, _attempt|
      seen = [env["rack.hijack?"], env.key?("rack.hijack")]
      [201, {}, []]
    end
    app = app_for(handler, @pool)
    post(app, tenant, fresh_key, headers: { "rack.hijack?" => true, "rack.hijack" => -> {} })
    assert_equal [false, false], seen
  end
end
