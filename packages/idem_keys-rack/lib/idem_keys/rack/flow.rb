# frozen_string_literal: true

module IdemKeys
  module Rack
    # What both modes' flows hold: the app behind the middleware and the middleware's parts. Each subclass answers
    # #call(env, tenant, key, fingerprint) its own way (DefaultFlow, TransactionalFlow).
    class Flow
      # app: the Rack app behind the middleware; options: Options; answers: Answers; stored: StoredHeaders.
      def initialize(app, options, answers, stored)
        @app = app
        @options = options
        @database = options.database
        @answers = answers
        @stored = stored
        @log = options.logger
      end
    end
  end
end
