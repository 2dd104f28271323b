# frozen_string_literal: true

require "pg"
require_relative "store"

module IdemKeys
  module Rack
    # The database could not give the middleware a connection (the pool timed out, the server is gone): the
    # request is answered 503 store-unavailable, and nothing was done.
    class StoreUnavailable < StandardError; end

    # How a transactional request's transaction ended: :committed, :rolled_back, :commit_failed (the server's
    # answer proves nothing was committed) or :commit_unknown (the COMMIT's answer never came: it may have
    # committed); error is what the COMMIT raised, for the log (or, :committed, an after_commit callback of the
    # app's that raised once the COMMIT had succeeded).
    TransactionEnd = Struct.new(:state, :error)

    # What the middleware decided inside a transaction: commit or roll back, then answer response, or raise error
    # (the app's exception, which goes on once the transaction has ended).
    Decision = Struct.new(:commit, :response, :error, keyword_init: true)

    # The database behind the middleware: a pool of PG::Connection (PgPool, pg_pool.rb) or ActiveRecord's
    # connection (ActiveRecordDatabase, active_record_database.rb). Both hand the Store a PG::Connection, for one
    # statement that commits on its own (statement) or for the request's transaction (transaction).
    module Database
      # SQLSTATEs of a session the server shut down (admin_shutdown, crash_shutdown, cannot_connect_now): sent
      # in place of the COMMIT's answer, they say nothing of whether it committed. So does class 08 (the
      # connection failed).
      SESSION_ENDED = %w[57P01 57P02 57P03].freeze

      module_function

      # The adapter for the pool: option of the middleware.
      def for(pool)
        if pool == :active_record
          unless defined?(::ActiveRecord::Base)
            raise ArgumentError, "pool: :active_record needs ActiveRecord loaded (require \"active_record\" first)"
          end

          ActiveRecordDatabase.new(::ActiveRecord::Base)
        elsif pool.is_a?(Class) && pool.respond_to?(:connection_pool) && pool.respond_to?(:transaction)
          ActiveRecordDatabase.new(pool)
        elsif pool.respond_to?(:with)
          PgPool.new(->(&block) { pool.with(&block) })
        elsif pool.respond_to?(:call)
          PgPool.new(pool)
        else
          raise ArgumentError, "pool: a pool of PG::Connection (anything with #with, as ConnectionPool has), a " \
                               "proc that yields a PG::Connection, :active_record or an ActiveRecord class; not " \
                               "#{pool.inspect}"
        end
      end

      # Runs the block with what checkout yields; an error of checkout's own (before it yields) becomes
      # StoreUnavailable, one of the block goes on as it is.
      def checked_out(checkout)
        yielded = false
        checkout.call do |conn|
          yielded = true
          yield conn
        end
      rescue StandardError => e
        raise if yielded

        raise StoreUnavailable, "no database connection: #{e.class}: #{e.message}"
      end

      # How a transaction whose COMMIT raised error ended. Only an error answer of the server's proves a rollback;
      # a lost connection, a client-side timeout or an interrupt while COMMIT ran, or a session the server shut
      # down leave the outcome unknown. ActiveRecord wraps the driver's error (its cause): the deepest PG::Error
      # is the COMMIT's own.
      def commit_end(error)
        pg_error = nil
        cause = error
        while cause
          pg_error = cause if cause.is_a?(PG::Error)
          cause = cause.cause
        end
        TransactionEnd.new(pg_error.nil? || outcome_unknown?(pg_error) ? :commit_unknown : :commit_failed, error)
      end

      # Whether a COMMIT's PG::Error leaves its outcome unknown: no SQLSTATE (the connection, not the server),
      # class 08 or a session shut down (SESSION_ENDED), or a PANIC, which the server raises in the commit's
      # critical section (a WAL flush that failed; "cannot abort transaction ..., it was already committed") and
      # crashes on, whether or not the commit record was written.
      def outcome_unknown?(pg_error)
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

require_relative "pg_pool"
require_relative "active_record_database"
