# frozen_string_literal: true

require_relative "rack/version"
require_relative "rack/middleware"

module IdemKeys
  # Idempotency keys for Rack apps (Rails, Sinatra, Roda, plain Rack) on PostgreSQL's idem_keys extension or its
  # portable edition, through the pg gem or ActiveRecord's connection. See IdemKeys::Rack::Middleware.
  module Rack
    # Where a claimed request's Attempt is in the Rack env.
    ENV_KEY = "idem_keys.attempt"

    # The Attempt the request runs under, or nil (not claimed: another method, no key with required: false).
    def self.attempt(env)
      env[ENV_KEY]
    end
  end
end
