# frozen_string_literal: true

require_relative "problems"
require_relative "stored_headers"
require_relative "store"

module IdemKeys
  module Rack
    # The Rack answers of a keyed request, in either mode: the app's own (with the outcome header), a replay of
    # the stored one, and the problems of a claim that did not claim or an answer that was not stored. Header
    # names are lower case, as Rack 3 requires (and Rack 2 allows).
    class Answers
      # Statuses that carry no body, so no content-length either (Rack::Lint).
      BODILESS = ->(status) { status < 200 || status == 204 || status == 304 }

      def initialize(outcome_header, log)
        @outcome_header = outcome_header
        @log = log
      end

      # The app's answer as it gave it, its body in one piece, plus the outcome header.
      def app(attempt, status, headers, body)
        headers = headers.dup
        headers[@outcome_header] = attempt.outcome if @outcome_header
        [status, headers, [body]]
      end

      # The answer to a claim that did not claim (a Store::Claim): a replay, a duplicate, a mismatch.
      def unclaimed(claim)
        case claim.outcome
        when "replay" then replay(claim)
        when "in_progress"
          # The server counts down to the end of the first attempt's lease; 0 would invite a tight loop.
          Problems.response("request-in-progress", retry_after: [1, claim.retry_after.to_i].max,
                                                   extra: outcome(claim.outcome))
        when "mismatch" then Problems.response("key-reused", extra: outcome(claim.outcome))
        else
          @log.error("idempotency: idem_claim answered outcome #{claim.outcome.inspect}, unknown to this version")
          Problems.response("store-unavailable")
        end
      end

      # The answer when idem_finish refused to store the app's status (error: what it raised).
      def finish_failed(attempt, status, error)
        if Store.sqlstate(error) == Store::LEASE_LOST
          # This request ran past its lease and another took the key over: that one's answer is the one that
          # counts, and a retry gets it.
          @log.warn("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect}: lease lost, the #{status} " \
                    "answer is dropped")
          return Problems.response("lease-lost", extra: outcome(attempt.outcome))
        end
        # Too large (54000) or the database went away: by default the key stays claimed until its lease ends; in a
        # transaction, the claim is rolled back with everything else.
        @log.error("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect}: the #{status} answer could " \
                   "not be stored: #{error.message}")
        Problems.response("store-failed", extra: outcome(attempt.outcome))
      end

      # A problem of the middleware's own about a request that has an outcome (or nil).
      def problem(code, outcome_name)
        Problems.response(code, extra: outcome(outcome_name))
      end

      private

      def replay(claim)
        body = claim.response || "".b
        status = claim.status_code
        headers = StoredHeaders.replayed(claim.headers)
        headers["content-length"] = body.bytesize.to_s unless BODILESS.call(status)
        headers["idempotent-replayed"] = "true"
        headers[@outcome_header] = claim.outcome if @outcome_header
        [status, headers, BODILESS.call(status) ? [] : [body]]
      end

      def outcome(name)
        @outcome_header && name ? { @outcome_header => name } : nil
      end
    end
  end
end
