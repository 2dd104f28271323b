# frozen_string_literal: true

require_relative "test_helper"
require "active_support"
require "active_support/core_ext/numeric/time"

# The options: the one vocabulary of every idem_keys middleware (docs/integrations.md, "Options"), each checked
# when the middleware is built, never on a request.
class OptionsTest < Minitest::Test
  VOCABULARY = %i[scope lease wait retention methods required retryable_statuses stored_headers outcome_header
                  max_body_bytes transactional logger].freeze
  SCOPE = ->(env) { env["test.tenant"] }

  def setup
    @pool = TestPool.new(size: 1)
  end

  def teardown
    @pool.close
  end

  def build(**options)
    IdemKeys::Rack::Middleware.new(Handler.new, **{ pool: @pool, scope: SCOPE }.merge(options))
  end

  def options(**options)
    IdemKeys::Rack::Options.new(**{ pool: @pool, scope: SCOPE }.merge(options))
  end

  # The keywords are the vocabulary's, plus the pool (each package's own kind of database).
  def test_the_option_names_are_the_vocabulary
    names = IdemKeys::Rack::Options.instance_method(:initialize).parameters.map(&:last)
    assert_equal (VOCABULARY + [:pool]).sort, names.sort
    build(scope: SCOPE, lease: 30, wait: 2, retention: 3600, methods: %w[POST], required: false,
          retryable_statuses: [503], stored_headers: %w[Location], outcome_header: "Idempotency-Outcome",
          max_body_bytes: 1024, transactional: false, logger: Logger.new(nil))
  end

  def test_durations_are_seconds
    assert_equal [4.0, 1.5, 0.5], [options(lease: 4).lease, options(lease: 1.5).lease, options(lease: 1r / 2).lease]
    assert_equal [120.0, 2.0, 86_400.0], [options(lease: 2.minutes).lease, options(wait: 2.seconds).wait,
                                          options(retention: 1.day).retention]
    # nil: the server's idem_keys.lease and idem_keys.retention; a wait of 0 or nil: none.
    assert_equal [nil, nil, nil, nil], [options.lease, options.retention, options.wait, options(wait: 0).wait]
  end

  # An interval string is refused, naming the option and what it takes: seconds.
  def test_interval_strings_are_refused
    %i[lease wait retention].each do |option|
      ["30s", "1 day", "00:00:30", "30"].each do |text|
        error = assert_raises(ArgumentError, "#{option}: #{text}") { build(option => text) }
        assert_match(/\A#{option}: seconds\b/, error.message)
        assert_includes error.message, text.inspect
      end
    end
  end

  def test_durations_out_of_range_are_refused
    bad = [
      [:lease, 0], [:lease, -1], [:lease, 0.0], [:retention, 0], [:retention, -0.5], [:wait, -1],
      [:lease, Float::INFINITY], [:wait, Float::NAN], [:lease, Complex(1, 1)], [:lease, true], [:wait, []],
      [:retention, :forever]
    ]
    bad.each do |option, value|
      error = assert_raises(ArgumentError, "#{option}: #{value.inspect}") { build(option => value) }
      assert_match(/\A#{option}: .*seconds/, error.message)
    end
  end

  def test_every_other_bad_option_is_refused
    assert_raises(ArgumentError) { IdemKeys::Rack::Middleware.new(Handler.new, pool: @pool) } # no scope
    assert_raises(ArgumentError) { IdemKeys::Rack::Middleware.new(Handler.new, scope: SCOPE) } # no pool
    [
      [:scope, "tenant"], [:pool, Object.new], [:pool, nil], [:required, "yes"], [:retryable_statuses, [42]],
      [:retryable_statuses, ["503"]], [:stored_headers, ["Content-Length"]], [:stored_headers, ["transfer-encoding"]],
      [:stored_headers, ["a b"]], [:outcome_header, "a b"], [:outcome_header, :outcome], [:max_body_bytes, 0],
      [:max_body_bytes, 1.5], [:transactional, "yes"], [:methods, []]
    ].each do |option, value|
      error = assert_raises(ArgumentError, "#{option}: #{value.inspect}") { build(option => value) }
      assert_match(/\A#{option}: /, error.message)
    end
    error = assert_raises(ArgumentError) { build(colour: :red) }
    assert_match(/unknown keyword: :colour/, error.message)
  end

  # Rack 3 wants lower-case response header names: the outcome header is sent so, whatever its spelling here.
  def test_the_outcome_header_is_sent_in_lower_case
    assert_equal "idempotency-outcome", options(outcome_header: "Idempotency-Outcome").outcome_header
    assert_equal({ "x-trace" => "X-Trace" }, options(stored_headers: %w[X-Trace]).stored_headers)
  end
end
