# frozen_string_literal: true

require_relative "answers"
require_relative "default_flow"
require_relative "fingerprint"
require_relative "key"
require_relative "options"
require_relative "problems"
require_relative "request_body"
require_relative "stored_headers"
require_relative "transactional_flow"

module IdemKeys
  module Rack
    # Runs a request that carries an Idempotency-Key at most once per key and scope, and answers every retry with
    # the first answer. The rules are docs/integrations.md's, the same as the Go, Python and Node middlewares'.
    #
    #   use IdemKeys::Rack::Middleware, pool: POOL, scope: ->(env) { env["app.tenant"] }
    #   config.middleware.use IdemKeys::Rack::Middleware, pool: :active_record, scope: ..., transactional: true
    #
    # Every option is checked here, when the app is built (Options): a wrong one raises ArgumentError at boot,
    # never on a request.
    class Middleware
      DEFAULT_STORED_HEADERS = Options::DEFAULT_STORED_HEADERS

      # pool: the database (Database.for). scope: scope.call(env) -> String or nil, whose keys these are (from
      # authentication, never a header the client sets). Durations (lease, wait, retention): seconds, a number or
      # an ActiveSupport::Duration; nil takes the server's setting (wait: none). The rest: README's option table.
      def initialize(app, **options)
        @app = app
        @options = Options.new(**options)
        answers = Answers.new(@options.outcome_header, @options.logger)
        stored = StoredHeaders.new(@options.stored_headers)
        @default = DefaultFlow.new(app, @options, answers, stored)
        @transactional = TransactionalFlow.new(app, @options, answers, stored)
      end

      def call(env)
        return @app.call(env) unless @options.methods.include?(env["REQUEST_METHOD"])

        # Rack servers join several fields of one name with ", " (puma does), and a joined value is never a valid
        # key: a space is not allowed bare, nothing may follow a closing quote.
        field = env["HTTP_IDEMPOTENCY_KEY"]
        return @options.required ? Problems.response("key-missing") : @app.call(env) if field.nil?

        key = Key.parse(field)
        return Problems.response("key-malformed") if key.nil?

        tenant = scope_of(env)
        return Problems.response("scope-missing") if tenant.nil?

        body = RequestBody.read(env, @options.max_body_bytes, @options.logger)
        return Problems.response("body-too-large") if body == :too_large
        return Problems.response("body-unreadable") if body == :unreadable

        flow = @options.transactional?(env) ? @transactional : @default
        flow.call(env, tenant, key, Fingerprint.of(env, body))
      end

      private

      # The request's scope, or nil (logged) when the scope function gave none.
      def scope_of(env)
        tenant = @options.scope.call(env)
        unless tenant.nil? || tenant.is_a?(String)
          raise TypeError, "the scope function returned #{tenant.class}, not String or nil"
        end
        return tenant unless tenant.nil? || tenant.empty?

        @options.logger.error("idempotency: the scope function gave no scope for #{env['REQUEST_METHOD']} " \
                              "#{env['PATH_INFO']}")
        nil
      end
    end
  end
end
