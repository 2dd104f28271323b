# frozen_string_literal: true

module IdemKeys
  module Rack
    # The claim a request runs under, at env["idem_keys.attempt"] (Rails: request.env["idem_keys.attempt"], or
    # IdemKeys::Rack.attempt(request.env)). Only requests the middleware claimed have one.
    class Attempt
      # scope: whose keys; key: the key, unquoted; outcome: "claimed", or "recovered" (the key's previous owner
      # ran out its lease unfinished); token: the fencing token, only this attempt may finish or release the key.
      attr_reader :scope, :key, :outcome, :token

      def initialize(scope:, key:, outcome:, token:, connection: nil)
        @scope = scope
        @key = key
        @outcome = outcome
        @token = token
        @connection = connection
        @unsettled = false
      end

      # True when a previous attempt ran out its lease unfinished: it may have done part of the work, so look for
      # what it did (reconcile) before acting.
      def recovered?
        @outcome == "recovered"
      end

      # Neither store the answer nor release the key: the outcome is unknown (the payment provider did not
      # answer: maybe charged). The claim runs out its lease and the next request with the key runs recovered.
      def leave_unsettled!
        @unsettled = true
      end

      def unsettled?
        @unsettled
      end

      # Transactional mode: the PG::Connection whose open transaction holds the claim (on ActiveRecord, the
      # raw_connection of the thread's connection, so ActiveRecord's own writes are in it too). nil outside the
      # mode, and once the transaction has ended.
      attr_reader :connection

      # :nodoc: the transaction ended: the connection is no longer the handler's.
      def ended!
        @connection = nil
      end
    end
  end
end
