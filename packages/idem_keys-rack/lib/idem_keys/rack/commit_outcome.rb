# frozen_string_literal: true

require "pg"
require_relative "store"

module IdemKeys
  module Rack
    # How a transactional request's transaction ended: :committed, :rolled_back, :commit_failed (the server's
    # answer proves nothing was committed) or :commit_unknown (the COMMIT's answer never came: it may have
    # committed); error is what the COMMIT raised, for the log (or, :committed, an after_commit callback of the
    # app's that raised once the COMMIT had succeeded).
    TransactionEnd = Struct.new(:state, :error)

    # Which of commit_failed and commit_unknown a COMMIT that raised ended in.
    module CommitOutcome
      # SQLSTATEs of a session the server shut down (admin_shutdown, crash_shutdown, cannot_connect_now): sent
      # in place of the COMMIT's answer, they say nothing of whether it committed. So does class 08 (the
      # connection failed).
      SESSION_ENDED = %w[57P01 57P02 57P03].freeze

      module_function

      # The TransactionEnd of a COMMIT that raised error. Only an error answer of the server's proves a rollback;
      # a lost connection, a client-side timeout or an interrupt while COMMIT ran, or a session the server shut
      # down leave the outcome unknown. ActiveRecord wraps the driver's error (its cause): the deepest PG::Error
      # is the COMMIT's own.
      def of(error)
        pg_error = nil
        cause = error
        while cause
          pg_error = cause if cause.is_a?(PG::Error)
          cause = cause.cause
        end
        TransactionEnd.new(pg_error.nil? || unknown?(pg_error) ? :commit_unknown : :commit_failed, error)
      end

      # Whether a COMMIT's PG::Error leaves its outcome unknown: no SQLSTATE (the connection, not the server),
      # class 08 or a session shut down (SESSION_ENDED), or a PANIC, which the server raises in the commit's
      # critical section (a WAL flush that failed; "cannot abort transaction ..., it was already committed") and
      # crashes on, whether or not the commit record was written.
      def unknown?(pg_error)
        sqlstate = Store.sqlstate(pg_error)
        return true if sqlstate.nil? || sqlstate.start_with?("08") || SESSION_ENDED.include?(sqlstate)

        severity(pg_error) == "PANIC"
      end

      # The severity of a server error: the untranslated field (PostgreSQL 9.6 and later), else the one in the
      # server's lc_messages.
      def severity(pg_error)
        result = pg_error.result
        result.error_field(PG::PG_DIAG_SEVERITY_NONLOCALIZED) || result.error_field(PG::PG_DIAG_SEVERITY)
      end
    end
  end
end
