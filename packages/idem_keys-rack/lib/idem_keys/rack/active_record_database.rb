# frozen_string_literal: true

require "pg"
require_relative "active_record_transaction"
require_relative "commit_outcome"
require_relative "connection_health"
require_relative "handler_savepoints"
require_relative "key_commit"

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
            return CommitOutcome.of(commit&.error || e)
          ensure
            KeyCommit.unwatch(ar)
          end
          rolled_back || TransactionEnd.new(:committed, nil)
        end
      end

      private

      # The raw PG::Connection, reconnected first (ActiveRecord's own reconnect!, which also sets the session up
      # again) when it is broken and no transaction of the app's depends on it. ActiveRecord verifies a
      # connection when it checks it out of its pool (Rails 7.1 and later: on its first use after), not while a
      # thread holds it, and the middleware's statements go around ActiveRecord, which does not see them fail.
      def raw_connection(ar)
        raw = unavailable_unless_connected("connecting") { ar.raw_connection }
        return raw if ar.transaction_open? || !ConnectionHealth.broken?(raw)

        ConnectionHealth.cancel_running(raw)
        return raw unless ConnectionHealth.broken?(raw)

        unavailable_unless_connected("reconnecting") do
          ar.reconnect!
          ar.raw_connection
        end
      end

      # The block's value; ActiveRecord's or the driver's error in it (Rails 7.1 and later connect on the first
      # use of a connection checked out, not in the checkout) is StoreUnavailable: nothing was done.
      def unavailable_unless_connected(what)
        yield
      rescue ::ActiveRecord::ActiveRecordError, PG::Error => e
        raise StoreUnavailable, "#{what} failed: #{e.class}: #{e.message}"
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
  end
end
