# frozen_string_literal: true

require "logger"
require "stringio"
require "json"
require "pg"
require_relative "attempt"
require_relative "database"
require_relative "key"
require_relative "problems"
require_relative "store"

module IdemKeys
  module Rack
    # Runs a request that carries an Idempotency-Key at most once per key and scope, and answers every retry with
    # the first answer. The rules are docs/integrations.md's, the same as the Go, Python and Node middlewares'.
    #
    #   use IdemKeys::Rack::Middleware, pool: POOL, scope: ->(env) { env["app.tenant"] }
    #   config.middleware.use IdemKeys::Rack::Middleware, pool: :active_record, scope: ..., transactional: true
    #
    # Every option is checked here, when the app is built: a wrong one raises ArgumentError at boot, never on a
    # request.
    class Middleware
      DEFAULT_STORED_HEADERS = %w[Content-Type Content-Language Content-Location Location ETag Link].freeze
      # The framing of an answer is the server's to compute on every send, never something to replay.
      FRAMING_HEADERS = %w[content-length transfer-encoding].freeze
      # Statuses that carry no body, so no Content-Length either (Rack::Lint).
      BODILESS = ->(status) { status < 200 || status == 204 || status == 304 }
      # A header name (RFC 9110's token).
      TOKEN = /\A[!#$%&'*+.^_`|~0-9A-Za-z-]+\z/.freeze

      # pool: see Database.for. scope: scope.call(env) -> String or nil, whose keys these are (from
      # authentication, never a header the client sets). Durations (lease, wait, retention): seconds (Numeric,
      # ActiveSupport::Duration) or a PostgreSQL interval string; nil takes the server's setting (wait: none).
      def initialize(app, pool:, scope:, lease: nil, wait: nil, retention: nil, methods: %w[POST PATCH],
                     required: true, retryable_statuses: [429, 503], stored_headers: DEFAULT_STORED_HEADERS,
                     outcome_header: nil, max_body_bytes: 1 << 20, transactional: false, logger: nil)
        @app = app
        # No default scope: one shared by every tenant would let one tenant's key answer another's request.
        unless scope.respond_to?(:call)
          raise ArgumentError, "scope: a function of the Rack env giving its tenant (#call), not #{scope.inspect}"
        end

        @scope_of = scope
        @database = Database.for(pool)
        @lease = interval(:lease, lease, zero: false)
        @wait = interval(:wait, wait, zero: true)
        @retention = interval(:retention, retention, zero: false)
        @methods = Array(methods).map { |m| m.to_s.upcase }.freeze
        raise ArgumentError, "methods: at least one" if @methods.empty?
        raise ArgumentError, "required: true or false, not #{required.inspect}" unless [true, false].include?(required)

        @required = required
        @retryable = Array(retryable_statuses).map do |s|
          unless s.is_a?(Integer) && s.between?(100, 599)
            raise ArgumentError, "retryable_statuses: HTTP statuses, not #{s.inspect}"
          end

          s
        end.freeze
        @stored = Array(stored_headers).to_h { |name| [name.to_s.downcase, name.to_s] }.freeze
        unless (@stored.keys & FRAMING_HEADERS).empty?
          raise ArgumentError, "stored_headers: Content-Length and Transfer-Encoding are recomputed on every answer"
        end
        unless outcome_header.nil? || (outcome_header.is_a?(String) && outcome_header.match?(TOKEN))
          raise ArgumentError, "outcome_header: a header name or nil, not #{outcome_header.inspect}"
        end

        @outcome_header = outcome_header
        unless max_body_bytes.is_a?(Integer) && max_body_bytes.positive?
          raise ArgumentError, "max_body_bytes: a positive Integer, not #{max_body_bytes.inspect}"
        end

        # The body is held whole in memory for the fingerprint, before any limit of the app's applies.
        @max_body = max_body_bytes
        unless [true, false].include?(transactional) || transactional.respond_to?(:call)
          raise ArgumentError, "transactional: true, false or a function of the Rack env, not #{transactional.inspect}"
        end

        @transactional = transactional
        @log = logger || Logger.new($stderr, progname: "idem_keys-rack")
      end

      def call(env)
        return @app.call(env) unless @methods.include?(env["REQUEST_METHOD"])

        # Rack servers join several fields of one name with ", " (puma does), and a joined value is never a valid
        # key: a space is not allowed bare, nothing may follow a closing quote.
        field = env["HTTP_IDEMPOTENCY_KEY"]
        return @required ? Problems.response("key-missing") : @app.call(env) if field.nil?

        key = Key.parse(field)
        return Problems.response("key-malformed") if key.nil?

        tenant = @scope_of.call(env)
        unless tenant.nil? || tenant.is_a?(String)
          raise TypeError, "the scope function returned #{tenant.class}, not String or nil"
        end
        if tenant.nil? || tenant.empty?
          @log.error("idempotency: the scope function gave no scope for #{env['REQUEST_METHOD']} #{env['PATH_INFO']}")
          return Problems.response("scope-missing")
        end

        body = read_body(env)
        return Problems.response("body-too-large") if body == :too_large
        return Problems.response("body-unreadable") if body == :unreadable

        request = Store::Request.new(method: env["REQUEST_METHOD"], target: target(env), body: body, json: json?(env))
        transactional?(env) ? call_in_transaction(env, tenant, key, request) : call_alone(env, tenant, key, request)
      end

      private

      # ---- the default mode: the claim, the handler and the answer each commit on their own ----------------

      def call_alone(env, tenant, key, request)
        claim = begin
          @database.statement { |conn| Store.claim(conn, tenant, key, request, @lease, @wait) }
        rescue PG::Error, StoreUnavailable => e
          @log.warn("idempotency: claim of #{key.inspect} in #{tenant.inspect} failed: #{e.message}")
          return Problems.response("store-unavailable")
        end
        return answer_unclaimed(claim) unless claimed?(claim)

        attempt = Attempt.new(scope: tenant, key: key, outcome: claim.outcome, token: claim.token)
        begin
          status, headers, body = run(env, attempt)
        rescue StandardError
          # Raised before a complete answer: the handler promises nothing happened, so the key goes back. An
          # Exception that is not a StandardError (a signal, a killed thread) is not caught: the outcome is
          # unknown, so the claim runs out its lease.
          release(attempt) unless attempt.unsettled?
          raise
        end
        return answer(attempt, status, headers, body) if attempt.unsettled?

        if @retryable.include?(status)
          release(attempt)
          return answer(attempt, status, headers, body)
        end
        begin
          @database.statement do |conn|
            Store.finish(conn, tenant, key, attempt.token, status, body, headers_to_store(headers), @retention)
          end
        rescue PG::Error, StoreUnavailable => e
          return finish_failed(attempt, status, e)
        end
        answer(attempt, status, headers, body)
      end

      def release(attempt)
        released = @database.statement { |conn| Store.release(conn, attempt.scope, attempt.key, attempt.token) }
        return if released

        @log.info("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect} was taken over before its release")
      rescue PG::Error, StoreUnavailable => e
        # Harmless to the client: the claim runs out its lease and the next request recovers the key.
        @log.warn("idempotency: release of #{attempt.key.inspect} in #{attempt.scope.inspect} failed: #{e.message}")
      end

      # ---- the transactional mode: one transaction for the claim, the handler's work and the answer --------

      def call_in_transaction(env, tenant, key, request)
        decision = nil
        attempt = nil
        ended = begin
          @database.transaction do |tx|
            decision, attempt = decide(env, tx, tenant, key, request)
            decision
          end
        rescue PG::Error, StoreUnavailable => e
          raise unless decision.nil? # the block's own failures are in its decision

          @log.warn("idempotency: BEGIN for #{key.inspect} in #{tenant.inspect} failed: #{e.message}")
          return Problems.response("store-unavailable")
        ensure
          attempt&.ended!
        end
        case ended.state
        when :commit_failed
          # The server refused the COMMIT (a serialization failure, a deferred constraint, a read-only standby):
          # nothing of the request stays, so the retry runs it again.
          @log.warn("idempotency: #{key.inspect} in #{tenant.inspect}: the transaction could not be committed, " \
                    "nothing was done: #{ended.error&.message}")
          raise decision.error if decision.error

          return Problems.response("commit-failed", extra: outcome_header(attempt&.outcome))
        when :commit_unknown
          # The COMMIT's answer was lost (the connection, a timeout, a server shutting down): it may have committed.
          # The key's claim and answer commit with the handler's work or not at all, so the retry learns which.
          @log.error("idempotency: #{key.inspect} in #{tenant.inspect}: the outcome of the COMMIT is unknown, the " \
                     "request's changes may or may not have been committed; a retry with the same Idempotency-Key " \
                     "replays the stored answer if they were, or runs the request afresh if not: " \
                     "#{ended.error&.class}: #{ended.error&.message}")
          raise decision.error if decision.error

          return Problems.response("commit-unknown", extra: outcome_header(attempt&.outcome))
        when :committed
          if ended.error
            @log.error("idempotency: #{key.inspect} in #{tenant.inspect}: committed, then an after_commit callback " \
                       "raised; the stored answer is sent: #{ended.error.class}: #{ended.error.message}")
          end
        end
        raise decision.error if decision.error

        decision.response
      end

      # What to do with the transaction tx, and the answer: [Decision, Attempt or nil].
      def decide(env, tx, tenant, key, request)
        claim = begin
          Store.claim(tx.connection, tenant, key, request, @lease, @wait, restart: -> { tx.restart })
        rescue PG::Error => e
          @log.warn("idempotency: claim of #{key.inspect} in #{tenant.inspect} failed: #{e.message}")
          return [Decision.new(commit: false, response: Problems.response("store-unavailable")), nil]
        end
        # A replay, a duplicate, a mismatch: the claim wrote nothing, the transaction ends with it.
        return [Decision.new(commit: false, response: answer_unclaimed(claim)), nil] unless claimed?(claim)

        attempt = Attempt.new(scope: tenant, key: key, outcome: claim.outcome, token: claim.token,
                              connection: tx.connection)
        begin
          status, headers, body = run(env, attempt)
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
          return Decision.new(commit: false,
                              response: Problems.response("store-failed", extra: outcome_header(attempt.outcome)))
        end
        # Unsettled: its work and the claim commit; the key is recovered once the lease ends.
        return Decision.new(commit: true, response: answer(attempt, status, headers, body)) if attempt.unsettled?
        # Retryable: its work and the claim vanish, the key is free at once.
        if @retryable.include?(status)
          return Decision.new(commit: false, response: answer(attempt, status, headers, body))
        end

        begin
          Store.finish(tx.connection, attempt.scope, attempt.key, attempt.token, status, body,
                       headers_to_store(headers), @retention)
        rescue PG::Error => e
          return Decision.new(commit: false, response: finish_failed(attempt, status, e))
        end
        Decision.new(commit: true, response: answer(attempt, status, headers, body))
      end

      # ---- both modes -------------------------------------------------------------------------------------

      def transactional?(env)
        return @transactional unless @transactional.respond_to?(:call)

        @transactional.call(env) ? true : false
      end

      def claimed?(claim)
        %w[claimed recovered].include?(claim.outcome) && !claim.token.nil?
      end

      def answer_unclaimed(claim)
        case claim.outcome
        when "replay" then replay(claim)
        when "in_progress"
          # The server counts down to the end of the first attempt's lease; 0 would invite a tight loop.
          Problems.response("request-in-progress", retry_after: [1, claim.retry_after.to_i].max,
                                                   extra: outcome_header(claim.outcome))
        when "mismatch" then Problems.response("key-reused", extra: outcome_header(claim.outcome))
        else
          @log.error("idempotency: idem_claim answered outcome #{claim.outcome.inspect}, unknown to this version")
          Problems.response("store-unavailable")
        end
      end

      # Runs the app with the claim and holds its whole answer: [status, headers, body bytes].
      def run(env, attempt)
        env[ENV_KEY] = attempt
        # Hijacking would answer around the middleware, which could then neither hold nor store the answer.
        env["rack.hijack?"] = false
        env.delete("rack.hijack")
        status, headers, body = @app.call(env)
        [status.to_i, headers, collect(body)]
      end

      def collect(body)
        bytes = String.new(encoding: Encoding::BINARY)
        body.each { |chunk| bytes << chunk.b }
        bytes
      ensure
        body.close if body.respond_to?(:close)
      end

      def finish_failed(attempt, status, error)
        if Store.sqlstate(error) == Store::LEASE_LOST
          # This request ran past its lease and another took the key over: that one's answer is the one that
          # counts, and a retry gets it.
          @log.warn("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect}: lease lost, the #{status} " \
                    "answer is dropped")
          return Problems.response("lease-lost", extra: outcome_header(attempt.outcome))
        end
        # Too large (54000) or the database went away: by default the key stays claimed until its lease ends; in a
        # transaction, the claim is rolled back with everything else.
        @log.error("idempotency: #{attempt.key.inspect} in #{attempt.scope.inspect}: the #{status} answer could " \
                   "not be stored: #{error.message}")
        Problems.response("store-failed", extra: outcome_header(attempt.outcome))
      end

      # The app's answer as it gave it, its body in one piece, plus the outcome header.
      def answer(attempt, status, headers, body)
        headers = headers.dup
        headers[@outcome_header] = attempt.outcome if @outcome_header
        [status, headers, [body]]
      end

      def replay(claim)
        body = claim.response || "".b
        headers = {}
        (claim.headers || {}).each do |name, value|
          next if FRAMING_HEADERS.include?(name.downcase)

          headers[name] = value.to_s.encode(Encoding::ISO_8859_1, invalid: :replace, undef: :replace).b
        end
        headers["Content-Length"] = body.bytesize.to_s unless BODILESS.call(claim.status_code)
        headers["Idempotent-Replayed"] = "true"
        headers[@outcome_header] = claim.outcome if @outcome_header
        [claim.status_code, headers, BODILESS.call(claim.status_code) ? [] : [body]]
      end

      def outcome_header(outcome)
        @outcome_header && outcome ? { @outcome_header => outcome } : nil
      end

      # The allow-listed headers, as idem_finish stores them: the allow-list's spelling => value; several fields
      # (Rack 2 joins them with "\n", Rack 3 gives an Array) joined with ", ". Latin-1, as HTTP carries them.
      def headers_to_store(headers)
        stored = {}
        headers.each do |name, value|
          canonical = @stored[name.to_s.downcase]
          next unless canonical

          values = value.is_a?(Array) ? value.map(&:to_s) : value.to_s.split("\n")
          text = values.join(", ").b.force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8)
          stored[canonical] = stored.key?(canonical) ? "#{stored[canonical]}, #{text}" : text
        end
        stored
      end

      # The whole request body, for the fingerprint, handed to the app again as a fresh rack.input; :too_large
      # past the limit (the rest is not read), :unreadable when reading it failed.
      def read_body(env)
        declared = env["CONTENT_LENGTH"]
        return :too_large if declared && declared.to_i > @max_body

        input = env["rack.input"]
        body = input ? input.read(@max_body + 1) : nil
        body = body.nil? ? "".b : body.b
        return :too_large if body.bytesize > @max_body

        env["rack.input"] = StringIO.new(body)
        env["CONTENT_LENGTH"] = body.bytesize.to_s if declared || !body.empty?
        body
      rescue IOError, SystemCallError, EOFError => e
        @log.warn("idempotency: the request body could not be read: #{e.class}: #{e.message}")
        :unreadable
      end

      # Path and query as the client sent them: not decoded, so /a%2Fb and /a/b stay two requests.
      def target(env)
        path = "#{env['SCRIPT_NAME']}#{env['PATH_INFO']}"
        query = env["QUERY_STRING"].to_s
        query.empty? ? path : "#{path}?#{query}"
      end

      # A JSON media type (application/json, application/*+json) on a body that is not compressed (no
      # Content-Encoding, or identity): a compressed JSON body counts by its bytes, in every idem_keys middleware.
      def json?(env)
        media = env["CONTENT_TYPE"].to_s.split(";", 2).first.to_s.strip.downcase
        encoding = env["HTTP_CONTENT_ENCODING"].to_s.strip.downcase
        encoding = "identity" if encoding.empty?
        json_type = media == "application/json" || (media.start_with?("application/") && media.end_with?("+json"))
        json_type && encoding == "identity"
      end

      def interval(option, value, zero:)
        return value if value.nil? || value.is_a?(String)

        # is_a?, not `when Numeric`: an ActiveSupport::Duration says it is one only to is_a?.
        if value.is_a?(Numeric) && !value.is_a?(Complex)
          seconds = value.to_f
          if seconds.negative? || (seconds.zero? && !zero)
            raise ArgumentError, "#{option} must be #{zero ? 'at least' : 'more than'} zero, not #{value.inspect}"
          end

          return nil if seconds.zero? # wait: 0 and nil both mean "do not wait"

          value.is_a?(Integer) ? "#{value.to_i} seconds" : format("%.6f seconds", seconds)
        else
          raise ArgumentError, "#{option}: seconds (a Numeric or ActiveSupport::Duration) or a PostgreSQL interval " \
                               "string, not #{value.inspect}"
        end
      end
    end
  end
end
