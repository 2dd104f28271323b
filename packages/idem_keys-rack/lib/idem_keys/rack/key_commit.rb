# frozen_string_literal: true

require_relative "connection_health"

module IdemKeys
  module Rack
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
  end
end
