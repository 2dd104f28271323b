# frozen_string_literal: true

require "pg"
require_relative "connection_health"
require_relative "pg_transaction"

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
  end
end
