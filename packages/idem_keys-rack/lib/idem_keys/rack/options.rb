# frozen_string_literal: true

require "logger"
require_relative "database"
require_relative "stored_headers"

module IdemKeys
  module Rack
    # The middleware's options, named as in every idem_keys middleware (docs/integrations.md, "Options"), checked
    # once when the app is built: a wrong one raises ArgumentError at boot, never on a request. An unknown name is
    # Ruby's own ArgumentError ("unknown keyword").
    class Options
      DEFAULT_STORED_HEADERS = %w[Content-Type Content-Language Content-Location Location ETag Link].freeze
      # A header name (RFC 9110's token).
      TOKEN = /\A[!#$%&'*+.^_`|~0-9A-Za-z-]+\z/.freeze

      # database: the adapter of pool (Database.for). lease, wait, retention: seconds as a Float, or nil for the
      # server's setting (wait: no waiting). stored_headers: lower-case name => the allow-list's spelling, which
      # idem_finish stores. outcome_header: lower-case, as Rack 3 wants response header names, or nil.
      attr_reader :database, :scope, :lease, :wait, :retention, :methods, :required, :retryable_statuses,
                  :stored_headers, :outcome_header, :max_body_bytes, :logger

      # pool and scope: see Middleware#initialize.
      def initialize(pool:, scope:, lease: nil, wait: nil, retention: nil, methods: %w[POST PATCH], required: true,
                     retryable_statuses: [429, 503], stored_headers: DEFAULT_STORED_HEADERS, outcome_header: nil,
                     max_body_bytes: 1 << 20, transactional: false, logger: nil)
        @scope = scope_function(scope)
        @database = Database.for(pool)
        @lease = Options.seconds(:lease, lease, zero: false)
        @wait = Options.seconds(:wait, wait, zero: true)
        @retention = Options.seconds(:retention, retention, zero: false)
        @methods = method_names(methods)
        @required = boolean(:required, required)
        @retryable_statuses = statuses(retryable_statuses)
        @stored_headers = allow_list(stored_headers)
        @outcome_header = header_name(outcome_header)
        @max_body_bytes = positive_integer(:max_body_bytes, max_body_bytes)
        @transactional = transactional_choice(transactional)
        @logger = logger || Logger.new($stderr, progname: "idem_keys-rack")
        freeze
      end

      # Whether the request env runs in transactional mode.
      def transactional?(env)
        return @transactional unless @transactional.respond_to?(:call)

        @transactional.call(env) ? true : false
      end

      # A duration option as seconds (a Float), or nil: nil takes the server's setting, and a wait of 0 is no
      # wait. Seconds are a number (Integer, Float, Rational) or an ActiveSupport::Duration (2.minutes), which is
      # Numeric to is_a? only. A PostgreSQL interval string is refused: every idem_keys middleware takes seconds.
      def self.seconds(option, value, zero:)
        return nil if value.nil?

        if value.is_a?(String)
          raise ArgumentError, "#{option}: seconds (a number or an ActiveSupport::Duration), not the string " \
                               "#{value.inspect}: interval strings are not accepted (e.g. #{option}: 30)"
        end
        unless value.is_a?(Numeric) && !value.is_a?(Complex) && value.to_f.finite?
          raise ArgumentError, "#{option}: seconds (a number or an ActiveSupport::Duration), not #{value.inspect}"
        end

        seconds = value.to_f
        if seconds.negative? || (seconds.zero? && !zero)
          raise ArgumentError, "#{option}: #{zero ? 'zero or more' : 'more than zero'} seconds, not #{value.inspect}"
        end

        seconds.zero? ? nil : seconds
      end

      private

      # No default scope: one shared by every tenant would let one tenant's key answer another's request.
      def scope_function(scope)
        return scope if scope.respond_to?(:call)

        raise ArgumentError, "scope: a function of the Rack env giving its tenant (#call), not #{scope.inspect}"
      end

      def method_names(methods)
        names = Array(methods).map { |m| m.to_s.upcase }.freeze
        raise ArgumentError, "methods: at least one HTTP method" if names.empty?

        names
      end

      def boolean(option, value)
        return value if [true, false].include?(value)

        raise ArgumentError, "#{option}: true or false, not #{value.inspect}"
      end

      def statuses(values)
        Array(values).map do |status|
          next status if status.is_a?(Integer) && status.between?(100, 599)

          raise ArgumentError, "retryable_statuses: HTTP statuses, not #{status.inspect}"
        end.freeze
      end

      def allow_list(names)
        list = Array(names).to_h { |name| [name.to_s.downcase, name.to_s] }.freeze
        bad = list.values.reject { |name| name.match?(TOKEN) }
        raise ArgumentError, "stored_headers: header names, not #{bad.first.inspect}" unless bad.empty?
        unless (list.keys & StoredHeaders::FRAMING).empty?
          raise ArgumentError, "stored_headers: Content-Length and Transfer-Encoding are recomputed on every answer"
        end

        list
      end

      def header_name(name)
        return nil if name.nil?
        return name.downcase.freeze if name.is_a?(String) && name.match?(TOKEN)

        raise ArgumentError, "outcome_header: a header name or nil, not #{name.inspect}"
      end

      # The body is held whole in memory for the fingerprint, before any limit of the app's applies.
      def positive_integer(option, value)
        return value if value.is_a?(Integer) && value.positive?

        raise ArgumentError, "#{option}: a positive Integer (bytes), not #{value.inspect}"
      end

      def transactional_choice(value)
        return value if [true, false].include?(value) || value.respond_to?(:call)

        raise ArgumentError, "transactional: true, false or a function of the Rack env, not #{value.inspect}"
      end
    end
  end
end
