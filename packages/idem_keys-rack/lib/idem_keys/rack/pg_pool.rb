# frozen_string_literal: true

require "pg"
require_relative "connection_health"
require_relative "transaction_status"

module IdemKeys
  module Rack
    # A pool of PG::Connection: `with` yields one (the connection_pool gem's ConnectionPool, a Sequel-less
    # hand-made pool), or a proc does (`->(&block) { POOL.with(&block) }`). A connection found broken is reset
    # before it is used, and one the middleware leaves broken (lost, interrupted mid-statement, in a transaction)
    # is made usable again before it goes back: after a restart or a failover each comes back by itself.
    class PgPool
      def initialize(checkout)
        @checkout = checkout
      end

      # A connection outside any transaction, for one statement that commits on its own.
      def statement
        Database.checked_out(@checkout) do |conn|
          usable!(conn)
          begin
            yield conn
          ensure
            ConnectionHealth.tidy(conn)
          end
        end
      end

      # Yields a PgTransaction (BEGIN sent); the block returns a Decision. Returns a TransactionEnd. Raises (PG::Error,
      # StoreUnavailable) only when no transaction could begin; an exception of the block rolls back and goes on.
      def transaction
        Database.checked_out(@checkout) do |conn|
          usable!(conn)
          begin
            conn.exec("BEGIN")
            tx = PgTransaction.new(conn)
            begin
              decision = yield tx
            rescue Exception # rubocop:disable Lint/RescueException -- whatever it is, the transaction ends here
              tx.rollback
              raise
            end
            decision.commit ? tx.commit : tx.rollback
          ensure
            ConnectionHealth.tidy(conn)
          end
        end
      end

      private

      def usable!(conn)
        ConnectionHealth.reset(conn) if ConnectionHealth.broken?(conn)
        return if conn.transaction_status == PG::PQTRANS_IDLE

        # Not the middleware's to end (the connection_pool gem hands a thread the connection it already holds,
        # perhaps inside the app's own transaction), and our commits would go into it.
        raise StoreUnavailable, "the pool gave a connection that is inside a transaction (transaction status " \
                                "#{conn.transaction_status}): something returned it, or holds it, inside a transaction"
      end
    end

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
        Database.commit_end(e)
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
