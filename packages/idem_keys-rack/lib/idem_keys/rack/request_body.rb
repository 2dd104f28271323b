# frozen_string_literal: true

require "stringio"

module IdemKeys
  module Rack
    # The request body, read whole before the claim (the fingerprint covers it) and handed to the app again.
    module RequestBody
      module_function

      # The body's bytes, the app's rack.input then a fresh copy of them; :too_large past max_bytes (the rest is
      # not read), :unreadable when reading failed (logged on log). Rack 3 lets rack.input be missing (a request
      # without a body) or unable to rewind: it is read once, from where it stands, and never rewound.
      def read(env, max_bytes, log)
        declared = env["CONTENT_LENGTH"]
        return :too_large if declared && declared.to_i > max_bytes

        input = env["rack.input"]
        body = input&.read(max_bytes + 1)
        body = body.nil? ? "".b : body.b
        return :too_large if body.bytesize > max_bytes

        # A StringIO of a binary String is in binary mode, as Rack::Lint wants rack.input, and rewinds.
        env["rack.input"] = StringIO.new(body)
        env["CONTENT_LENGTH"] = body.bytesize.to_s if declared || !body.empty?
        body
      rescue IOError, SystemCallError, EOFError => e
        log.warn("idempotency: the request body could not be read: #{e.class}: #{e.message}")
        :unreadable
      end
    end
  end
end
