# frozen_string_literal: true

module IdemKeys
  module Rack
    # The Idempotency-Key header: a Structured Field String, or the bare token Stripe-style clients send.
    module Key
      MAX_LENGTH = 255

      module_function

      # The key in one Idempotency-Key field value, or nil when the value is malformed.
      #
      # `"8e03978e-40d5-43e8"` (printable ASCII between double quotes, `\"` and `\\` the only escapes) and
      # `8e03978e-40d5-43e8` (visible ASCII without `"` or `\`) are the same key. After unquoting it has 1 to 255
      # characters. The value is taken as bytes (Rack servers hand header values over as binary strings), so
      # anything above `~` is refused rather than guessed at.
      def parse(value)
        # HTTP strips the optional whitespace around a field value; a client library may not have.
        bytes = value.to_s.b.bytes
        bytes.shift while [0x20, 0x09].include?(bytes.first)
        bytes.pop while [0x20, 0x09].include?(bytes.last)
        key = if bytes.first == 0x22 # "
                unquote(bytes)
              elsif !bytes.empty? && bytes.all? { |b| b >= 0x21 && b <= 0x7E && b != 0x22 && b != 0x5C }
                bytes
              end
        return nil if key.nil? || key.empty? || key.length > MAX_LENGTH

        key.pack("C*").force_encoding(Encoding::UTF_8) # ASCII only, so valid UTF-8
      end

      # The content of an sf-string as bytes, or nil. Nothing may follow the closing quote: Structured Field
      # parameters (`"k";p=1`) would make two spellings of one key.
      def unquote(bytes)
        out = []
        i = 1
        while i < bytes.length
          b = bytes[i]
          if b == 0x5C # backslash
            return nil unless [0x22, 0x5C].include?(bytes[i + 1])

            out << bytes[i + 1]
            i += 2
          elsif b == 0x22
            return i == bytes.length - 1 ? out : nil
          elsif b >= 0x20 && b <= 0x7E
            out << b
            i += 1
          else
            return nil
          end
        end
        nil # no closing quote
      end
      private_class_method :unquote
    end
  end
end
