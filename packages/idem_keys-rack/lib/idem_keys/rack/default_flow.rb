# frozen_string_literal: true

require "pg"
require_relative "attempt"
require_relative "database"
require_relative "flow"
require_relative "response_capture"
require_relative "problems"
require_relative "store"

module IdemKeys
  module Rack
    # The default mode: the claim, the handler and the answer each commit on their own. The claim is visible to
    # every duplicate before the handler starts, and the answer is durable before the client sees it; the
    # handler's own writes are at-least-once (a recovered attempt looks for them).
    class DefaultFlow < Flow
      # The answer to the request env with key in tenant's scope, whose Fingerprint is fingerprint.
      def call(env, tenant, key, fingerprint)
        claim = begin
          @database.statement do |conn|
            Store.claim(conn, tenant, key, fingerprint, @options.lease, @options.wait)
          end
        rescue PG::Error, StoreUnavailable => e
          @log.warn("idempotency: claim of #{key.inspect} in #{tenant.inspect} failed: #{e.message}")
          return Problems.response("store-unavailable")
        end
        return @answers.unclaimed(claim) unless claim.claimed?

        attempt = Attempt.new(scope: tenant, key: key, outcome: claim.outcome, token: claim.token)
        begin
          status, headers, body = ResponseCapture.run(@app, env, attempt)
        rescue StandardError
          # Raised before a complete answer: the handler promises nothing happened, so the key goes back. An
          # Exception that is not a StandardError (a signal, a killed thread) is not caught: the outcome is
          # unknown, so the claim runs out its lease.
          release(attempt) unless attempt.unsettled?
          raise
        end
        settle(attempt, status, headers, body)
      end

      private

      # Stores the answer, or releases the key (a retryable status), or leaves it be (unsettled); then the
      # answer for the client.
      def settle(attempt, status, headers, body)
        return @answers.app(attempt, status, headers, body) if attempt.unsettled?

        if @options.retryable_statuses.include?(status)
          release(attempt)
          return @answers.app(attempt, status, headers, body)
        end
        begin
          @database.statement do |conn|
            Store.finish(conn, attempt.scope, attempt.key, attempt.token, status, body, @stored.pick(headers),
                         @options.retention)
          end
        rescue PG::Error, StoreUnavailable => e
          return @answers.finish_failed(attempt, status, e)
        end
        @answers.app(attempt, status, headers, body)
      end

      def release(attempt)
        released = @database.statement { |conn| Store.release(conn, attempt.scope, attempt.key, attempt.token) }
        return if released

        @log.info("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect} was taken over before its release")
      rescue PG::Error, StoreUnavailable => e
        # Harmless to the client: the claim runs out its lease and the next request recovers the key.
        @log.warn("idempotency: release of #{attempt.key.inspect} in #{attempt.scope.inspect} failed: #{e.message}")
      end
    end
  end
end
