# frozen_string_literal: true

require_relative "transaction_status"

module IdemKeys
  module Rack
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
