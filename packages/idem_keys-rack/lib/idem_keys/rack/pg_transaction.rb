# frozen_string_literal: true

require "pg"
require_relative "commit_outcome"
require_relative "transaction_status"

module IdemKeys
  module Rack
    # One request's transaction on a connection of a PgPool.
    class PgTransaction
      include TransactionStatus

      attr_reader :connection

      def initialize(connection)
        @connection = connection
      end

      # Rolls back what the transaction did and begins another on the same connection.
      def restart
        @connection.exec("ROLLBACK")
        @connection.exec("BEGIN")
      end

      # A client-side timeout or interrupt while COMMIT ran (a StandardError: Timeout::Error, Rack::Timeout's)
      # leaves the outcome unknown like a lost connection; the connection, its COMMIT perhaps still running, is
      # reset by PgPool before it goes back.
      def commit
        # An aborted transaction's COMMIT answers ROLLBACK without an error: say what it would have done.
        if aborted?
          rollback
          return TransactionEnd.new(:commit_failed, PG::InFailedSqlTransaction.new("the transaction was aborted by " \
                                                                                  "an earlier error"))
        end

        result = @connection.exec("COMMIT")
        return TransactionEnd.new(:committed, nil) if result.cmd_status == "COMMIT"

        # ROLLBACK without an error: the transaction had ended in failure already (the server says so).
        TransactionEnd.new(:commit_failed, PG::Error.new("COMMIT answered #{result.cmd_status}"))
      rescue StandardError => e
        CommitOutcome.of(e)
      end

      # Never raises: a connection whose ROLLBACK failed (lost) is reset by PgPool before it goes back, so the pool
      # never gets it back still in a transaction.
      def rollback
        @connection.exec("ROLLBACK") if open?
        TransactionEnd.new(:rolled_back, nil)
      rescue PG::Error
        TransactionEnd.new(:rolled_back, nil)
      end
    end
  end
end
