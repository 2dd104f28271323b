# frozen_string_literal: true

module IdemKeys
  module Rack
    # What a key is bound to (docs/integrations.md, "The fingerprint"): the method, the target (path and query as
    # the client sent them, bytes) and the body (bytes); json says whether the body counts by its canonical JSON.
    Fingerprint = Struct.new(:method, :target, :body, :json, keyword_init: true) do
      # The fingerprint of the request env whose body is body (RequestBody.read).
      def self.of(env, body)
        new(method: env["REQUEST_METHOD"], target: target_of(env), body: body, json: json?(env))
      end

      # Path and query as the server passed them: not decoded, so /a%2Fb and /a/b stay two requests.
      def self.target_of(env)
        path = "#{env['SCRIPT_NAME']}#{env['PATH_INFO']}"
        query = env["QUERY_STRING"].to_s
        query.empty? ? path : "#{path}?#{query}"
      end

      # A JSON media type (application/json, application/*+json) on a body that is not compressed (no
      # Content-Encoding, or identity): a compressed JSON body counts by its bytes, in every idem_keys middleware.
      def self.json?(env)
        media = env["CONTENT_TYPE"].to_s.split(";", 2).first.to_s.strip.downcase
        encoding = env["HTTP_CONTENT_ENCODING"].to_s.strip.downcase
        encoding = "identity" if encoding.empty?
        json_type = media == "application/json" || (media.start_with?("application/") && media.end_with?("+json"))
        json_type && encoding == "identity"
      end

      # The target as text for jsonb_build_object: Latin-1 keeps every byte, so two targets never read the same.
      def target_text
        target.b.force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8)
      end

      # method || ' ' || target || '\n' || body: the bytes fingerprint.
      def as_bytes
        "#{method} ".b << target.b << "\n".b << body.b
      end
    end
  end
end
