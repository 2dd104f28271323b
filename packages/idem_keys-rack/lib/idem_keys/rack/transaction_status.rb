# frozen_string_literal: true

require "pg"
require_relative "connection_health"

module IdemKeys
  module Rack
    # Where a request's transaction stands, from its PG::Connection (`connection`): the same for PgTransaction
    # and ActiveRecordTransaction.
    module TransactionStatus
      # Whether the middleware's transaction is still open (the handler did not COMMIT or ROLLBACK it).
      def open?
        ConnectionHealth::IN_TRANSACTION.include?(connection.transaction_status)
      end

      # Whether a statement failed in it: its COMMIT would answer ROLLBACK.
      def aborted?
        connection.transaction_status == PG::PQTRANS_INERROR
      end
    end
  end
end
