# frozen_string_literal: true

require "pg"

module IdemKeys
  module Rack
    # The database could not give the middleware a connection (the pool timed out, the server is gone): the
    # request is answered 503 store-unavailable, and nothing was done.
    class StoreUnavailable < StandardError; end

    # How a transactional request's transaction ended: :committed, :rolled_back or :commit_failed (with the error,
    # for the log).
    TransactionEnd = Struct.new(:state, :error)

    # What the middleware decided inside a transaction: commit or roll back, then answer response, or raise error
    # (the app's exception, which goes on once the transaction has ended).
    Decision = Struct.new(:commit, :response, :error, keyword_init: true)

    # The database behind the middleware: a pool of PG::Connection (PgPool) or ActiveRecord's connection
    # (ActiveRecordDatabase). Both hand the Store a PG::Connection, for one statement that commits on its own
    # (statement) or for the request's transaction (transaction).
    module Database
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
    end

    # A pool of PG::Connection: `with` yields one (the connection_pool gem's ConnectionPool, a Sequel-less
    # hand-made pool), or a proc does (`->(&block) { POOL.with(&block) }`).
    class PgPool
      def initialize(checkout)
        @checkout = checkout
      end

      # A connection outside any transaction, for one statement that commits on its own.
      def statement
        Database.checked_out(@checkout) do |conn|
          idle!(conn)
          yield conn
        end
      end

      # Yields a PgTransaction (BEGIN sent); the block returns a Decision. Returns a TransactionEnd. Raises (PG::Error,
      # StoreUnavailable) only when no transaction could begin; an exception of the block rolls back and goes on.
      def transaction
        Database.checked_out(@checkout) do |conn|
          idle!(conn)
          conn.exec("BEGIN")
          tx = PgTransaction.new(conn)
          begin
            decision = yield tx
          rescue Exception # rubocop:disable Lint/RescueException -- whatever it is, the connection goes back clean
            tx.rollback
            raise
          end
          decision.commit ? tx.commit : tx.rollback
        end
      end

      private

      # A connection some code gave back inside a transaction would swallow our commits: refuse it.
      def idle!(conn)
        return if conn.transaction_status == PG::PQTRANS_IDLE

        raise StoreUnavailable, "the pool gave a connection that is not idle (transaction status " \
                                "#{conn.transaction_status}): something returned it inside a transaction"
      end
    end

    # One request's transaction on a connection of a PgPool.
    class PgTransaction
      attr_reader :connection

      def initialize(connection)
        @connection = connection
      end

      # Whether the middleware's transaction is still open (the handler did not COMMIT or ROLLBACK it).
      def open?
        [PG::PQTRANS_INTRANS, PG::PQTRANS_INERROR].include?(@connection.transaction_status)
      end

      def aborted?
        @connection.transaction_status == PG::PQTRANS_INERROR
      end

      # Rolls back what the transaction did and begins another on the same connection.
      def restart
        @connection.exec("ROLLBACK")
        @connection.exec("BEGIN")
      end

      def commit
        # An aborted transaction's COMMIT answers ROLLBACK without an error: say what it would have done.
        return failed(PG::InFailedSqlTransaction.new("the transaction was aborted by an earlier error")) if aborted?

        result = @connection.exec("COMMIT")
        return TransactionEnd.new(:committed, nil) if result.cmd_status == "COMMIT"

        failed(PG::Error.new("COMMIT answered #{result.cmd_status}"))
      rescue PG::Error => e
        failed(e)
      end

      # Never raises: a connection whose ROLLBACK failed (lost) is reset, so the pool never gets it back still
      # in a transaction.
      def rollback
        @connection.exec("ROLLBACK") unless @connection.transaction_status == PG::PQTRANS_IDLE
        TransactionEnd.new(:rolled_back, nil)
      rescue PG::Error
        begin
          @connection.reset
        rescue PG::Error
          nil # the next user of the connection gets the error, as with any connection lost in the pool
        end
        TransactionEnd.new(:rolled_back, nil)
      end

      private

      def failed(error)
        rollback
        TransactionEnd.new(:commit_failed, error)
      end
    end

    # ActiveRecord's connection (PostgreSQL adapter): the thread's connection of model's pool, whose
    # raw_connection is a PG::Connection. In transactional mode `model.transaction` wraps the claim, the app and
    # the finish, so the handler's ActiveRecord writes on that thread are in the key's transaction.
    class ActiveRecordDatabase
      def initialize(model)
        @model = model
        # Inside the lambda: a model without a connection yet fails there, as StoreUnavailable.
        @checkout = ->(&block) { @model.connection_pool.with_connection(&block) }
      end

      # The thread's connection as it is: a statement there joins a transaction the app (or a test's fixtures)
      # opened around the request, as ActiveRecord's own statements do; otherwise it commits on its own.
      def statement(&block)
        Database.checked_out(@checkout) do |ar|
          block.call(ar.raw_connection)
        end
      end

      # As PgPool#transaction, inside `model.transaction`. Inside a transaction that is already open (a test's
      # transactional fixtures), the key's work goes in a savepoint of it, and the outer transaction decides what
      # is committed.
      def transaction
        Database.checked_out(@checkout) do |ar|
          nested = ar.transaction_open?
          result = nil
          decided = false
          real = nil
          begin
            @model.transaction(requires_new: nested) do
              raw = ar.raw_connection # also sends the BEGIN (or SAVEPOINT) ActiveRecord may have held back
              real = ar.current_transaction
              tx = ActiveRecordTransaction.new(ar, raw, nested ? real.savepoint_name : nil)
              decision = yield tx
              decided = true
              if !decision.commit
                result = TransactionEnd.new(:rolled_back, nil)
                raise ::ActiveRecord::Rollback
              elsif tx.aborted?
                # COMMIT would answer ROLLBACK without an error, and ActiveRecord would not notice.
                result = TransactionEnd.new(:commit_failed, PG::InFailedSqlTransaction.new(
                  "the transaction was aborted by an earlier error"))
                raise ::ActiveRecord::Rollback
              end
            end
          rescue ::ActiveRecord::ActiveRecordError, PG::Error => e
            # Before the block's decision: the BEGIN failed (ActiveRecord wraps the driver's error).
            raise StoreUnavailable, "BEGIN failed: #{e.class}: #{e.message}" if !decided && !e.is_a?(PG::Error)
            raise unless decided && result.nil?

            # After the block: the COMMIT failed, unless it was an after_commit callback of the app's that raised
            # once the transaction had committed.
            if nested || !real&.state&.committed?
              return TransactionEnd.new(:commit_failed, e)
            end
          end
          result || TransactionEnd.new(:committed, nil)
        end
      end
    end

    # One request's transaction on ActiveRecord's connection.
    class ActiveRecordTransaction
      attr_reader :connection

      def initialize(ar, connection, savepoint)
        @ar = ar
        @connection = connection
        @savepoint = savepoint
      end

      def open?
        [PG::PQTRANS_INTRANS, PG::PQTRANS_INERROR].include?(@connection.transaction_status)
      end

      def aborted?
        @connection.transaction_status == PG::PQTRANS_INERROR
      end

      # After a failed JSON claim, which wrote nothing: back to where the transaction began. ActiveRecord has sent
      # nothing else yet, so its bookkeeping stays true.
      def restart
        if @savepoint
          @connection.exec("ROLLBACK TO SAVEPOINT #{@connection.quote_ident(@savepoint)}")
        else
          @connection.exec("ROLLBACK")
          @connection.exec("BEGIN")
        end
      end
    end
  end
end
