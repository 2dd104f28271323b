# frozen_string_literal: true

require "pg"
require_relative "attempt"
require_relative "database"
require_relative "flow"
require_relative "decision"
require_relative "response_capture"
require_relative "problems"
require_relative "store"

module IdemKeys
  module Rack
    # The transactional mode: one transaction for the claim, the handler's database work and the answer,
    # committed once before the client hears anything (docs/integrations.md, "Transactional mode").
    class TransactionalFlow < Flow
      # The answer to the request env with key in tenant's scope, whose Fingerprint is fingerprint.
      def call(env, tenant, key, fingerprint)
        decision = nil
        attempt = nil
        ended = begin
          @database.transaction do |tx|
            decision, attempt = decide(env, tx, tenant, key, fingerprint)
            decision
          end
        rescue PG::Error, StoreUnavailable => e
          raise unless decision.nil? # the block's own failures are in its decision

          @log.warn("idempotency: BEGIN for #{key.inspect} in #{tenant.inspect} failed: #{e.message}")
          return Problems.response("store-unavailable")
        ensure
          attempt&.ended!
        end
        answer(ended, decision, attempt, tenant, key)
      end

      private

      # What to do with the transaction tx, and the answer: [Decision, Attempt or nil].
      def decide(env, tx, tenant, key, fingerprint)
        claim = begin
          Store.claim(tx.connection, tenant, key, fingerprint, @options.lease, @options.wait,
                      restart: -> { tx.restart })
        rescue PG::Error => e
          @log.warn("idempotency: claim of #{key.inspect} in #{tenant.inspect} failed: #{e.message}")
          return [Decision.new(commit: false, response: Problems.response("store-unavailable")), nil]
        end
        # A replay, a duplicate, a mismatch: the claim wrote nothing, the transaction ends with it.
        return [Decision.new(commit: false, response: @answers.unclaimed(claim)), nil] unless claim.claimed?

        attempt = Attempt.new(scope: tenant, key: key, outcome: claim.outcome, token: claim.token,
                              connection: tx.connection)
        begin
          status, headers, body = ResponseCapture.run(@app, env, attempt)
        rescue StandardError => e
          # Rolled back, so the key is free at once; unless the handler left it unsettled first (its outcome is
          # unknown, say outside the database): then its work and the claim commit, unfinished.
          return [Decision.new(commit: attempt.unsettled?, error: e), attempt]
        rescue Exception => e # rubocop:disable Lint/RescueException -- a signal or a killed thread: roll back
          return [Decision.new(commit: false, error: e), attempt]
        end
        [settle_in(tx, attempt, status, headers, body), attempt]
      end

      def settle_in(tx, attempt, status, headers, body)
        unless tx.open?
          # The handler committed or rolled back the middleware's transaction: what is committed is not known.
          @log.error("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect}: the handler ended the " \
                     "middleware's transaction itself; the #{status} answer is not stored")
          return Decision.new(commit: false, response: @answers.problem("store-failed", attempt.outcome))
        end
        # Unsettled: its work and the claim commit; the key is recovered once the lease ends.
        return Decision.new(commit: true, response: @answers.app(attempt, status, headers, body)) if attempt.unsettled?
        # Retryable: its work and the claim vanish, the key is free at once.
        if @options.retryable_statuses.include?(status)
          return Decision.new(commit: false, response: @answers.app(attempt, status, headers, body))
        end

        begin
          Store.finish(tx.connection, attempt.scope, attempt.key, attempt.token, status, body,
                       @stored.pick(headers), @options.retention)
        rescue PG::Error => e
          return Decision.new(commit: false, response: @answers.finish_failed(attempt, status, e))
        end
        Decision.new(commit: true, response: @answers.app(attempt, status, headers, body))
      end

      # The client's answer once the transaction ended as ended (a TransactionEnd); the app's exception, if the
      # decision holds one, goes on instead.
      def answer(ended, decision, attempt, tenant, key)
        case ended.state
        when :commit_failed
          # The server refused the COMMIT (a serialization failure, a deferred constraint, a read-only standby):
          # nothing of the request stays, so the retry runs it again.
          @log.warn("idempotency: #{key.inspect} in #{tenant.inspect}: the transaction could not be committed, " \
                    "nothing was done: #{ended.error&.message}")
          raise decision.error if decision.error

          return @answers.problem("commit-failed", attempt&.outcome)
        when :commit_unknown
          # The COMMIT's answer was lost (the connection, a timeout, a server shutting down): it may have committed.
          # The key's claim and answer commit with the handler's work or not at all, so the retry learns which.
          @log.error("idempotency: #{key.inspect} in #{tenant.inspect}: the outcome of the COMMIT is unknown, the " \
                     "request's changes may or may not have been committed; a retry with the same Idempotency-Key " \
                     "replays the stored answer if they were, or runs the request afresh if not: " \
                     "#{ended.error&.class}: #{ended.error&.message}")
          raise decision.error if decision.error

          return @answers.problem("commit-unknown", attempt&.outcome)
        when :committed
          if ended.error
            @log.error("idempotency: #{key.inspect} in #{tenant.inspect}: committed, then an after_commit callback " \
                       "raised; the stored answer is sent: #{ended.error.class}: #{ended.error.message}")
          end
        end
        raise decision.error if decision.error

        decision.response
      end
    end
  end
end
