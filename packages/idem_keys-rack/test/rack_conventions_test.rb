# frozen_string_literal: true

require_relative "test_helper"

# What Rack 3 changed, on both Rack 2.2 and Rack 3, behind Rack::Lint: rack.input may be missing or unable to
# rewind, a body may answer to_ary, each or (Rack 3) call, header names are lower case, and an app may answer with
# a headers object of Rack's own.
class RackConventionsTest < Minitest::Test
  include Helpers

  # A request body a server hands over that reads once and cannot rewind (Rack 3 no longer requires it).
  class OneWayInput
    def initialize(text)
      @io = StringIO.new(text.b)
    end

    def read(*args)
      @io.read(*args)
    end

    def gets
      @io.gets
    end

    def each(&block)
      @io.each(&block)
    end

    def close; end
  end

  # A request body whose reading fails (the client went away while sending it).
  class BrokenInput < OneWayInput
    def read(*)
      raise IOError, "the client went away"
    end
  end

  # An answer's body of each kind, counting its closes: to_ary (which closes it, as Rack 3 asks), each, call.
  class CountedBody
    attr_reader :closes

    def initialize(parts)
      @parts = parts
      @closes = 0
    end

    def close
      @closes += 1
    end
  end

  class ArrayBody < CountedBody
    def each(&block)
      @parts.each(&block)
    end

    def to_ary
      @parts.dup
    ensure
      close
    end
  end

  class EachBody < CountedBody
    def each(&block)
      @parts.each(&block)
    end
  end

  class StreamingBody < CountedBody
    def call(stream)
      @parts.each { |part| stream.write(part) }
      stream.close
    end
  end

  def setup
    @pool = TestPool.new(size: 2)
  end

  def teardown
    assert @pool.idle?, "a connection was left out of the pool, or in a transaction"
    @pool.close
  end

  def test_an_input_that_cannot_rewind
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool)
    assert_equal 201, post(app, tenant, key, input: OneWayInput.new(BODY)).status
    assert_equal "true", post(app, tenant, key, input: OneWayInput.new(BODY)).headers["Idempotent-Replayed"]
    assert_problem post(app, tenant, key, input: OneWayInput.new("{}")), 422, "key-reused"
    assert_equal [BODY], handler.bodies # the app got the whole body, read once by the middleware
  end

  def test_a_request_without_rack_input
    handler, key = Handler.new, fresh_key
    app = app_for(handler, @pool)
    assert_equal 201, post(app, tenant, key, "", input: :none).status
    assert_equal "true", post(app, tenant, key, "", input: :none).headers["Idempotent-Replayed"]
    assert_equal [""], handler.bodies
  end

  def test_an_unreadable_body_is_refused_unclaimed
    handler, key = Handler.new, fresh_key
    log = StringIO.new
    assert_problem post(app_for(handler, @pool, log: log), tenant, key, input: BrokenInput.new(BODY)), 400,
                   "body-unreadable"
    assert_match(/could not be read: IOError: the client went away/, log.string)
    assert_equal [0, nil], [handler.runs, Database.stored(tenant, key)]
  end

  def test_every_kind_of_body_is_held_whole_and_closed
    [ArrayBody, EachBody, StreamingBody].each do |kind|
      body = nil
      handler = Handler.new do |_env, _attempt|
        body = kind.new(["pa", "", "id"])
        [201, { "content-type" => "text/plain" }, body]
      end
      # Checked on the middleware's side alone: on Rack 2 a streaming body, which Rack 2's Lint does not know; on
      # Rack 3 an each-only body, which Rack 3's Lint lets no middleware iterate (the middleware must hold the
      # whole answer before the key is settled: README, "How it behaves in Rack and Rails").
      app = if kind == (RACK3 ? EachBody : StreamingBody)
              linted_outside(handler, pool: @pool)
            else
              app_for(handler, @pool)
            end
      key = fresh_key
      first = post(app, tenant, key)
      assert_equal [201, "paid"], [first.status, first.body], kind.name
      assert_operator body.closes, :>=, 1, "#{kind.name} was not closed"
      again = post(app, tenant, key)
      assert_equal ["paid", "true"], [again.body, again.headers["Idempotent-Replayed"]], kind.name
      assert_equal 1, handler.runs, kind.name
    end
  end

  # Rack 3's Lint refuses an upper-case name; on Rack 2 the middleware writes the same lower-case names.
  def test_the_middlewares_header_names_are_lower_case
    app = linted(Handler.new, pool: @pool, outcome_header: "Idempotency-Outcome")
    key = fresh_key
    env = lambda do |body|
      ::Rack::MockRequest.env_for("/pay", method: "POST", input: body, "HTTP_IDEMPOTENCY_KEY" => key,
                                          "HTTP_X_TENANT" => tenant, "CONTENT_TYPE" => "application/json")
    end
    answers = [BODY, BODY, "{}"].map do |body|
      status, headers, parts = app.call(env.call(body))
      parts.close if parts.respond_to?(:close)
      [status, headers.keys]
    end
    assert_equal [201, 201, 422], answers.map(&:first) # claimed, replayed, key-reused
    answers.each { |_, names| assert_equal names.map(&:downcase), names }
    assert_includes answers[1].last, "idempotent-replayed"
    assert_includes answers[1].last, "idempotency-outcome"
  end

  # Rack's own headers object (Rack 3: Rack::Headers; Rack 2: Rack::Utils::HeaderHash), whatever case the app
  # wrote the names in: the allow-listed ones are stored and replayed.
  def test_an_answer_with_racks_headers_object
    headers_class = defined?(::Rack::Headers) ? ::Rack::Headers : ::Rack::Utils::HeaderHash
    handler = Handler.new do |_env, _attempt|
      headers = headers_class.new
      headers["Location"] = "/pay/7"
      headers["X-Trace"] = "t1"
      [201, headers, ["paid"]]
    end
    app, key = app_for(handler, @pool), fresh_key
    first = post(app, tenant, key)
    again = post(app, tenant, key)
    assert_equal [201, "/pay/7", "t1", "claimed"], [first.status, first.headers["Location"], first.headers["X-Trace"],
                                                     first.headers["Idempotency-Outcome"]]
    assert_equal ["/pay/7", nil, "true"], [again.headers["Location"], again.headers["X-Trace"],
                                           again.headers["Idempotent-Replayed"]]
  end
end
