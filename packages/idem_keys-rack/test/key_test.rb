# frozen_string_literal: true

require_relative "test_helper"

# The Idempotency-Key parser against every case of contract/keys.json.
class KeyTest < Minitest::Test
  CASES = Contract.load("keys")["cases"]

  def test_every_contract_case
    wrong = CASES.filter_map do |c|
      parsed = IdemKeys::Rack::Key.parse(c["value"])
      "#{c['name']}: #{c['value'].inspect} parsed to #{parsed.inspect}, not #{c['key'].inspect}" if parsed != c["key"]
    end
    assert_empty wrong
    assert_equal Contract.load("keys")["max_length"], IdemKeys::Rack::Key::MAX_LENGTH
  end

  # Rack servers hand header values over as binary strings: the same cases as bytes.
  def test_every_contract_case_as_bytes
    CASES.each do |c|
      parsed = IdemKeys::Rack::Key.parse(c["value"].b)
      c["key"].nil? ? assert_nil(parsed, c["name"]) : assert_equal(c["key"], parsed, c["name"])
    end
  end

  # HTTP strips the whitespace around a field value; a client library or a test may not have.
  def test_whitespace_around_the_value_is_not_part_of_the_key
    assert_equal "padded", IdemKeys::Rack::Key.parse(" \tpadded\t ")
    assert_equal "a b", IdemKeys::Rack::Key.parse(' "a b" ')
  end

  def test_a_key_is_utf8_text
    assert_equal Encoding::UTF_8, IdemKeys::Rack::Key.parse("abc".b).encoding
  end
end
