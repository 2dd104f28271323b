# frozen_string_literal: true

require "pg"
require_relative "connection_health"
require_relative "transaction_status"

module IdemKeys
  module Rack
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
          raw = raw_connection(ar)
          begin
            block.call(raw)
          ensure
            # Interrupted mid-statement: cancelled now, or ActiveRecord's next statement on the connection (its
            # verify at checkout too) would first wait for it to end.
            ConnectionHealth.cancel_running(raw)
          end
        end
      end

      # As PgPool#transaction, inside `model.transaction`. Inside a transaction that is already open (a test's
      # transactional fixtures), the key's work goes in a savepoint of it, and the outer transaction decides what
      # is committed.
      def transaction
        Database.checked_out(@checkout) do |ar|
          raw_connection(ar)
          nested = ar.transaction_open?
          decision = nil
          rolled_back = nil # what the middleware's own decision to roll back ended as
          ours = nil
          commit = nil # the key's COMMIT (not in a savepoint: the outer transaction commits)
          begin
            @model.transaction(requires_new: nested) do
              # Also sends the BEGIN (or SAVEPOINT) ActiveRecord may have held back, and (Rails 7.1 and later) marks
              # the transaction written to: a requires_new block in it is then a savepoint, never a "restart" of
              # it (RestartParentTransaction: ROLLBACK and BEGIN), which would roll the claim back.
              raw = ar.raw_connection
              ours = ar.current_transaction
              commit = KeyCommit.watch(ar, raw) unless nested
              tx = ActiveRecordTransaction.new(ar, raw, nested ? ours.savepoint_name : nil)
              begin
                decision = HandlerSavepoints.around(ar, ours) { yield tx }
              ensure
                # Interrupted mid-statement (the handler's or the claim's): cancelled, so the transaction shows
                # aborted, and ActiveRecord's ROLLBACK does not first wait for the statement to end.
                ConnectionHealth.cancel_running(raw)
              end
              rolled_back = rolling_back(decision, tx)
              raise ::ActiveRecord::Rollback if rolled_back
            end
          rescue StandardError => e
            unless decision
              # BEGIN failed (ActiveRecord wraps the driver's error); anything else (an interrupt) goes on.
              raise unless e.is_a?(::ActiveRecord::ActiveRecordError) || e.is_a?(PG::Error)

              raise StoreUnavailable, "BEGIN failed: #{e.class}: #{e.message}"
            end
            # The ROLLBACK the decision asked for failed: the connection is lost, which rolls back all the same.
            return rolled_back if rolled_back
            # An after_commit callback of the app's raised once the COMMIT had succeeded: committed.
            return TransactionEnd.new(:committed, e) if ours.state.committed?

            # What the COMMIT raised, not what ActiveRecord's ROLLBACK after it may have raised in its place.
            return Database.commit_end(commit&.error || e)
          ensure
            KeyCommit.unwatch(ar)
          end
          rolled_back || TransactionEnd.new(:committed, nil)
        end
      end

      private

      # The raw PG::Connection, reconnected first (ActiveRecord's own reconnect!, which also sets the session up
      # again) when it is broken and no transaction of the app's depends on it. ActiveRecord verifies a
      # connection when it checks it out of its pool, not while a thread holds it, and the middleware's
      # statements go around ActiveRecord, which does not see them fail.
      def raw_connection(ar)
        raw = ar.raw_connection
        return raw if ar.transaction_open? || !ConnectionHealth.broken?(raw)

        ConnectionHealth.cancel_running(raw)
        return raw unless ConnectionHealth.broken?(raw)

        begin
          ar.reconnect!
        rescue StandardError => e
          raise StoreUnavailable, "reconnecting failed: #{e.class}: #{e.message}"
        end
        ar.raw_connection
      end

      # The TransactionEnd of a decision to end the transaction without COMMIT, or nil to commit.
      def rolling_back(decision, tx)
        return TransactionEnd.new(:rolled_back, nil) unless decision.commit
        # COMMIT would answer ROLLBACK without an error, and ActiveRecord would not notice.
        return nil unless tx.aborted?

        TransactionEnd.new(:commit_failed, PG::InFailedSqlTransaction.new("the transaction was aborted by an " \
                                                                         "earlier error"))
      end
    end

    # Inside the middleware's transaction, the app's `transaction` blocks (its own, and the one every save and
    # destroy opens) are savepoints of it, as they are real transactions without the middleware: a
    # `raise ActiveRecord::Rollback`, or a save that returns false, undoes what the block did and nothing else
    # (joining the middleware's transaction, it would be swallowed and committed with the key). Not
    # `joinable: false` on the middleware's transaction, which makes ActiveRecord run the app's after_commit
    # callbacks when each savepoint is released, before the key's COMMIT, even when that then rolls back: here
    # their records join the middleware's transaction, and the callbacks run after its COMMIT. Blocks nested in
    # the app's own are ActiveRecord's as ever (a plain nested block joins the app's).
    module HandlerSavepoints
      # The middleware's ActiveRecord transaction on this connection, while the handler runs in it.
      attr_accessor :idem_keys_transaction

      # ActiveRecord's public DatabaseStatements#transaction, whose keywords have been these since Rails 5.
      def transaction(requires_new: nil, **options, &block)
        ours = idem_keys_transaction
        requires_new = true if ours && ours.equal?(current_transaction)
        super(requires_new: requires_new, **options, &block)
      end

      # Runs the block with ar's `transaction` blocks as savepoints of ours (an ActiveRecord transaction).
      def self.around(ar, ours)
        ar.singleton_class.prepend(self) unless ar.singleton_class.include?(self)
        outer = ar.idem_keys_transaction
        begin
          ar.idem_keys_transaction = ours
          yield
        ensure
          ar.idem_keys_transaction = outer
        end
      end
    end

    # The key's COMMIT on ActiveRecord's connection, which ActiveRecord sends when the `transaction` block ends,
    # outside the handler's clean-up. An exception while it runs (an interrupt: Rack::Timeout, Thread#raise)
    # ActiveRecord answers with a ROLLBACK, which would first wait for the COMMIT to end: held by a synchronous
    # standby or a deferred trigger, that is minutes, or on a connection whose server vanished, until TCP gives
    # up. The COMMIT is cancelled first (it commits or not: the middleware says the outcome is unknown), and what
    # it raised is kept for the middleware to classify.
    module KeyCommit
      # The Watch of the key's transaction on this connection, until its COMMIT is sent.
      attr_accessor :idem_keys_commit

      # ActiveRecord's public DatabaseStatements#commit_db_transaction (Rails 6.1 through 8.0).
      def commit_db_transaction
        watch = idem_keys_commit
        return super unless watch

        # Only the key's own COMMIT: an after_commit callback's transaction commits as ever.
        self.idem_keys_commit = nil
        watch.run { super }
      end

      # Watches ar's next COMMIT, that of the transaction on raw: returns the Watch.
      def self.watch(ar, raw)
        ar.singleton_class.prepend(self) unless ar.singleton_class.include?(self)
        ar.idem_keys_commit = Watch.new(raw)
      end

      def self.unwatch(ar)
        ar.idem_keys_commit = nil if ar.singleton_class.include?(self)
      end

      # One COMMIT on raw (a PG::Connection) and what it raised, if anything (error).
      class Watch
        attr_reader :error

        def initialize(raw)
          @raw = raw
        end

        def run
          yield
        rescue Exception => e # rubocop:disable Lint/RescueException -- an interrupt is what this is for
          @error = e
          ConnectionHealth.cancel_running(@raw)
          # The cancel did not reach the server: the session is closed rather than waited for.
          ConnectionHealth.abandon(@raw) if ConnectionHealth.running?(@raw)
          raise
        end
      end
    end

    # One request's transaction on ActiveRecord's connection.
    class ActiveRecordTransaction
      include TransactionStatus

      attr_reader :connection

      def initialize(ar, connection, savepoint)
        @ar = ar
        @connection = connection
        @savepoint = savepoint
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
