# frozen_string_literal: true

require_relative "test_helper"

class KeyTest < Minitest::Test
  ACCEPTED = {
    '"8e03978e-40d5-43e8"' => "8e03978e-40d5-43e8",
    "8e03978e-40d5-43e8" => "8e03978e-40d5-43e8",
    '"two words \\"quoted\\" and \\\\"' => 'two words "quoted" and \\',
    " \tpadded\t " => "padded",
    "k" * 255 => "k" * 255,
    "\"#{'k' * 255}\"" => "k" * 255,
    '"~ !"' => "~ !"
  }.freeze
  MALFORMED = ['"unclosed', "two words", "k" * 256, '""', "", '"a\\qb"', '"ab"c', '"abc";p=1', "caf\xE9".b,
               'ab"c', "back\\slash", "\"#{'k' * 256}\"", "tab\tinside", '"\\"', "one, two", '"a", "b"',
               "\"caf\xE9\"".b, "nul\0"].freeze

  def test_accepted
    ACCEPTED.each { |value, key| assert_equal key, IdemKeys::Rack::Key.parse(value), value.inspect }
  end

  def test_malformed
    MALFORMED.each { |value| assert_nil IdemKeys::Rack::Key.parse(value), value.inspect }
  end

  def test_a_key_is_utf8_text
    assert_equal Encoding::UTF_8, IdemKeys::Rack::Key.parse("abc".b).encoding
  end
end
