# frozen_string_literal: true

require_relative "test_helper"

class ProblemsTest < Minitest::Test
  Problems = IdemKeys::Rack::Problems

  # The bytes every idem_keys middleware writes (tests/http/suite.py compares them too).
  def test_commit_failed_bytes
    assert_equal '{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the request\'s ' \
                 'changes could not be committed: nothing was done, retry with the same Idempotency-Key",' \
                 '"code":"commit-failed"}', Problems.body("commit-failed")
  end

  # Said when the COMMIT's answer never came (transactional mode): the same bytes in every package.
  def test_commit_unknown_bytes
    assert_equal '{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"the request\'s ' \
                 'changes may or may not have been committed: retry with the same Idempotency-Key to learn which",' \
                 '"code":"commit-unknown"}', Problems.body("commit-unknown")
    assert_equal "1", Problems.response("commit-unknown")[1]["Retry-After"]
  end

  def test_every_problem_is_compact_json_in_order
    Problems::ALL.each do |code, (status, detail, _)|
      body = Problems.body(code)
      assert_equal %w[type title status detail code], JSON.parse(body).keys
      assert_equal JSON.generate(JSON.parse(body)), body
      assert_equal({ "type" => "about:blank", "title" => Problems::TITLES[status], "status" => status,
                     "detail" => detail, "code" => code }, JSON.parse(body))
    end
    assert_equal "Content Too Large", JSON.parse(Problems.body("body-too-large"))["title"]
    assert_equal "Unprocessable Content", JSON.parse(Problems.body("key-reused"))["title"]
  end

  def test_headers
    status, headers, body = Problems.response("store-unavailable")
    assert_equal 503, status
    assert_equal({ "Content-Type" => "application/problem+json", "Content-Length" => body.first.bytesize.to_s,
                   "Retry-After" => "1" }, headers)
    _, headers, = Problems.response("request-in-progress", retry_after: 7, extra: { "X-O" => "in_progress" })
    assert_equal "7", headers["Retry-After"]
    assert_equal "in_progress", headers["X-O"]
    _, headers, = Problems.response("key-missing")
    refute headers.key?("Retry-After")
  end
end
