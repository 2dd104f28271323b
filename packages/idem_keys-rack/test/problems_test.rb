# frozen_string_literal: true

require_relative "test_helper"

# The middleware's problem table against contract/problems.json: the same codes, and for each its status, its
# exact body bytes, its Content-Type and its Retry-After. The middleware tests check the answers themselves
# against the contract too (assert_problem).
class ProblemsTest < Minitest::Test
  Problems = IdemKeys::Rack::Problems

  def test_the_same_codes_as_the_contract
    assert_equal Contract.problems.keys.sort, Problems::ALL.keys.sort
  end

  def test_every_problem_as_the_contract_has_it
    Contract.problems.each do |code, problem|
      status, headers, body = Problems.response(code)
      assert_equal problem["status"], status, code
      assert_equal [problem["body"]], body, code
      assert_equal problem["body"], Problems.body(code), code
      assert_equal Contract.load("problems")["content_type"], headers["content-type"], code
      assert_equal problem["body"].bytesize.to_s, headers["content-length"], code
      if problem["retry_after"].nil?
        assert_nil headers["retry-after"], code
      else
        assert_equal (problem["retry_after"] == "lease" ? 1 : problem["retry_after"]).to_s, headers["retry-after"], code
      end
    end
  end

  # request-in-progress counts down to the end of the first attempt's lease; the outcome header is added.
  def test_retry_after_and_extra_headers
    _, headers, = Problems.response("request-in-progress", retry_after: 7, extra: { "x-o" => "in_progress" })
    assert_equal %w[7 in_progress], [headers["retry-after"], headers["x-o"]]
  end

  # Rack 3 wants lower-case header names (Rack::Lint), and Rack 2 takes them as well.
  def test_header_names_are_lower_case
    Contract.problems.each_key do |code|
      names = Problems.response(code)[1].keys
      assert_equal names.map(&:downcase), names, code
    end
  end
end
