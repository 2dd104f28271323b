# frozen_string_literal: true

module IdemKeys
  module Rack
    # The response headers a replay repeats (the stored_headers allow-list): picked from the app's answer for
    # idem_finish, and given back, in Rack's lower case, from what idem_claim replays.
    class StoredHeaders
      # Recomputed by the server on every answer (Options refuses them on the allow-list).
      FRAMING = %w[content-length transfer-encoding].freeze

      # allow_list: lower-case name => the spelling idem_finish stores (Options#stored_headers).
      def initialize(allow_list)
        @allow_list = allow_list
      end

      # The allow-listed headers of an answer, as idem_finish stores them: the allow-list's spelling => value.
      # Several fields (Rack 2 joins them with "\n", Rack 3 gives an Array) are joined with ", ". Latin-1, as HTTP
      # carries them.
      def pick(headers)
        stored = {}
        headers.each do |name, value|
          canonical = @allow_list[name.to_s.downcase]
          next unless canonical

          values = value.is_a?(Array) ? value.map(&:to_s) : value.to_s.split("\n")
          text = values.join(", ").b.force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8)
          stored[canonical] = stored.key?(canonical) ? "#{stored[canonical]}, #{text}" : text
        end
        stored
      end

      # The headers idem_claim replays (name => value, as stored), for a Rack answer: lower-case names, values
      # back in Latin-1 bytes, framing left to the server.
      def self.replayed(stored)
        (stored || {}).each_with_object({}) do |(name, value), headers|
          name = name.to_s.downcase
          next if FRAMING.include?(name)

          headers[name] = value.to_s.encode(Encoding::ISO_8859_1, invalid: :replace, undef: :replace).b
        end
      end
    end
  end
end
