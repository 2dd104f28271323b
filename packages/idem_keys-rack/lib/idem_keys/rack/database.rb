# frozen_string_literal: true

module IdemKeys
  module Rack
    # The database could not give the middleware a connection (the pool timed out, the server is gone): the
    # request is answered 503 store-unavailable, and nothing was done.
    class StoreUnavailable < StandardError; end

    # The database behind the middleware: a pool of PG::Connection (PgPool) or ActiveRecord's connection
    # (ActiveRecordDatabase). Both hand the Store a PG::Connection, for one statement that commits on its own
    # (statement) or for the request's transaction (transaction: the block gets a PgTransaction or an
    # ActiveRecordTransaction and returns a Decision; it returns a TransactionEnd).
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
  end
end

require_relative "pg_pool"
require_relative "active_record_database"
