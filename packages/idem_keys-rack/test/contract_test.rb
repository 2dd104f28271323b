# frozen_string_literal: true

require_relative "test_helper"

# The SQL the package sends is contract/sql.json's, and the fingerprint vectors of contract/fingerprints.json go
# through the middleware's claim path against $DATABASE_URL (the extension or the portable edition), in both
# modes: the same request replays the first answer, another is 422 key-reused.
class ContractTest < Minitest::Test
  include Helpers

  Store = IdemKeys::Rack::Store
  OURS = { "claim_json" => Store::CLAIM_JSON, "claim_bytes" => Store::CLAIM_BYTES, "finish" => Store::FINISH,
           "release" => Store::RELEASE }.freeze

  def setup
    @pool = TestPool.new(size: 2)
  end

  def teardown
    assert @pool.idle?, "a connection was left out of the pool, or in a transaction"
    @pool.close
  end

  def fold(sql)
    sql.gsub(/\s+/, " ").strip
  end

  def test_the_sql_is_the_contracts
    statements = Contract.load("sql")["statements"]
    assert_equal statements.keys.sort, OURS.keys.sort
    OURS.each { |name, sql| assert_equal fold(statements[name]["sql"]), fold(sql), name }
  end

  def test_fingerprint_vectors
    assert_vectors(transactional: false)
  end

  def test_fingerprint_vectors_in_transactional_mode
    assert_vectors(transactional: true)
  end

  private

  # Each vector's two requests under one fresh key; the handler answers with its run's number, so a replay shows
  # whose answer it is.
  def assert_vectors(transactional:)
    runs = 0
    handler = Handler.new { |_env, _attempt| [201, { "content-type" => "text/plain" }, ["run #{runs += 1}"]] }
    app = app_for(handler, @pool, transactional: transactional)
    vectors = Contract.load("fingerprints")["vectors"]
    refute_empty vectors
    wrong = vectors.filter_map do |vector|
      key = fresh_key
      first = send_request(app, key, vector["first"])
      second = send_request(app, key, vector["second"])
      problem = if first.status != 201 then "the first request answered #{first.status} #{first.body}"
                elsif vector["same"] then replayed(first, second)
                else reused(second)
                end
      "#{vector['name']}: #{problem}" if problem
    end
    assert_empty wrong
  end

  def send_request(app, key, request)
    headers = request["content_encoding"] ? { "HTTP_CONTENT_ENCODING" => request["content_encoding"] } : {}
    post(app, tenant, key, request["body"], path: request["target"], method: request["method"],
                                            type: request["content_type"], headers: headers)
  end

  # Why second is not the replay of first, or nil.
  def replayed(first, second)
    return nil if [second.status, second.body, second.headers["Idempotent-Replayed"]] == [201, first.body, "true"]

    "the second answered #{second.status} #{second.body.inspect} (replayed: " \
      "#{second.headers['Idempotent-Replayed'].inspect}), not the first's #{first.body.inspect}"
  end

  # Why second is not 422 key-reused, as the contract writes it, or nil.
  def reused(second)
    body = Contract.problems.fetch("key-reused")["body"]
    return nil if second.status == 422 && second.body == body

    "the second answered #{second.status} #{second.body.inspect}, not 422 key-reused"
  end
end
