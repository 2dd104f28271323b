# frozen_string_literal: true

module IdemKeys
  module Rack
    # Runs the app for a claimed request and holds its whole answer: the key is settled with the answer before the
    # client sees any of it, so a client never gets an answer a retry could not replay.
    module ResponseCapture
      module_function

      # The app's answer to env, run under attempt: [status, headers, body bytes].
      def run(app, env, attempt)
        env[ENV_KEY] = attempt
        # Hijacking would answer around the middleware, which could then neither hold nor store the answer.
        env["rack.hijack?"] = false
        env.delete("rack.hijack")
        status, headers, body = app.call(env)
        [status.to_i, headers, bytes_of(body)]
      end

      # Every byte of a Rack body, which is closed afterwards. Rack 3 lets a middleware process a body that
      # answers to_ary (an Array, Rails' answers), and that is read first. Any other body is read all the same,
      # with each or, a Rack 3 streaming body, with call and a stream that keeps what is written: the answer must
      # be whole before the key is settled, and a streamed answer is held whole too (docs/integrations.md), which
      # Rack 3's SPEC leaves to servers.
      def bytes_of(body)
        bytes = String.new(encoding: Encoding::BINARY)
        parts = body.to_ary if body.respond_to?(:to_ary)
        if parts.is_a?(Array)
          parts.each { |part| bytes << part.b }
        elsif body.respond_to?(:each)
          body.each { |part| bytes << part.b }
        else
          stream = Stream.new
          body.call(stream)
          bytes << stream.bytes
        end
        bytes
      ensure
        # Also after to_ary, which should have closed the body (Rails 7.2's does not); closing twice is harmless.
        body.close if body.respond_to?(:close)
      end

      # The stream a Rack 3 streaming body writes its answer to: it keeps what is written. Nothing can be read
      # from it (the request body was read already: RequestBody).
      class Stream
        attr_reader :bytes

        def initialize
          @bytes = String.new(encoding: Encoding::BINARY)
          @closed = false
        end

        def write(data)
          raise IOError, "the answer's stream is closed" if @closed

          text = data.to_s.b
          @bytes << text
          text.bytesize
        end

        def <<(data)
          write(data)
          self
        end

        def read(_length = nil, _buffer = nil)
          nil
        end

        def flush
          self
        end

        def close_read; end

        def close_write
          @closed = true
        end

        def close
          @closed = true
        end

        def closed?
          @closed
        end
      end
    end
  end
end
