# frozen_string_literal: true

require_relative "test_helper"

# How a COMMIT that raised is told apart: an error answer of the server's proves a rollback (commit-failed);
# anything else leaves the outcome unknown (commit-unknown). Constructed errors, as the driver would raise them.
class CommitClassificationTest < Minitest::Test
  # Stands in for the PG::Result of a server's error answer: its fields by PG::PG_DIAG_* code.
  ErrorAnswer = Struct.new(:fields) do
    def error_field(code)
      fields[code]
    end
  end

  # A wrapper of the driver's error, as ActiveRecord's StatementInvalid is (the driver's error is its cause).
  class Wrapped < StandardError; end

  def server_error(sqlstate, severity, nonlocalized: true)
    fields = { PG::PG_DIAG_SQLSTATE => sqlstate, PG::PG_DIAG_SEVERITY => severity }
    fields[PG::PG_DIAG_SEVERITY_NONLOCALIZED] = severity if nonlocalized
    (PG::ERROR_CLASSES[sqlstate] || PG::ServerError).new("#{severity}: a server error", result: ErrorAnswer.new(fields))
  end

  def wrapped(error)
    raise error
  rescue PG::Error
    begin
      raise Wrapped, "wrapped"
    rescue Wrapped => e
      e
    end
  end

  def state(error)
    IdemKeys::Rack::CommitOutcome.of(error).state
  end

  def test_each_commit_error_says_failed_or_unknown
    cases = {
      "a serialization failure" => [server_error("40001", "ERROR"), :commit_failed],
      "a deferred constraint" => [server_error("23505", "ERROR"), :commit_failed],
      "a read-only standby" => [server_error("25006", "ERROR"), :commit_failed],
      "a statement cancelled while COMMIT ran" => [server_error("57014", "ERROR"), :commit_failed],
      "the connection failed (class 08)" => [server_error("08006", "FATAL"), :commit_unknown],
      "admin_shutdown" => [server_error("57P01", "FATAL"), :commit_unknown],
      "crash_shutdown" => [server_error("57P02", "FATAL"), :commit_unknown],
      "cannot_connect_now" => [server_error("57P03", "FATAL"), :commit_unknown],
      # A PANIC in the commit's critical section (a WAL flush that failed; "cannot abort transaction ..., it was
      # already committed"): the server crashes, whatever the SQLSTATE.
      "a PANIC" => [server_error("XX000", "PANIC"), :commit_unknown],
      "a PANIC from a server before 9.6 (no untranslated severity)" =>
        [server_error("58P01", "PANIC", nonlocalized: false), :commit_unknown],
      "a lost connection (no SQLSTATE)" => [PG::ConnectionBad.new("server closed the connection unexpectedly"),
                                            :commit_unknown],
      "an interrupt (Rack::Timeout)" => [RequestTimeout.new("the request ran out of time"), :commit_unknown],
      "a wrapped refusal" => [wrapped(server_error("40001", "ERROR")), :commit_failed],
      "a wrapped PANIC" => [wrapped(server_error("XX000", "PANIC")), :commit_unknown]
    }
    wrong = cases.filter_map do |what, (error, expected)|
      "#{what}: #{state(error)}, not #{expected}" unless state(error) == expected
    end
    assert_empty wrong
  end
end
