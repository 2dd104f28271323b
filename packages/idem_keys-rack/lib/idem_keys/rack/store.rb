# frozen_string_literal: true

require "json"
require "pg"

module IdemKeys
  module Rack
    # The SQL the middleware runs: idem_claim, idem_finish and idem_release, bind parameters only, on a
    # PG::Connection the database adapter hands over (database.rb). By default each runs as one statement that
    # commits on its own: the claim is visible to every duplicate before the handler starts, and the answer is
    # durable before the client sees it. In transactional mode they run inside the request's transaction.
    module Store
      # Fields by name, never r.*: a newer idem_result may grow columns.
      RESULT = "r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after"
      CLAIM_JSON = <<~SQL.freeze
        SELECT #{RESULT}
          FROM idem_claim($1, $2, jsonb_build_object('method', $3::text, 'target', $4::text, 'body', $5::jsonb),
                          lease => $6::interval, wait => $7::interval) AS r
      SQL
      CLAIM_BYTES = <<~SQL.freeze
        SELECT #{RESULT}
          FROM idem_claim($1, $2, $3::bytea, lease => $4::interval, wait => $5::interval) AS r
      SQL
      # The bytea overload: a replay repeats the body byte for byte, where jsonb would reorder and respace it.
      FINISH = "SELECT idem_finish($1, $2, $3::bigint, $4::integer, $5::bytea, headers => $6::jsonb, " \
               "retention => $7::interval)"
      RELEASE = "SELECT idem_release($1, $2, $3::bigint) AS released"

      # invalid_text_representation, untranslatable_character, character_not_in_repertoire: the body said JSON
      # but jsonb cannot hold it; its bytes still fingerprint it.
      NOT_JSONB = %w[22P02 22P05 22021].freeze
      # object_not_in_prerequisite_state from idem_finish: another request took the key over (fencing token).
      LEASE_LOST = "55000"
      BYTEA = 17 # the bytea type's oid, for binary parameters

      # What idem_claim answered.
      Claim = Struct.new(:outcome, :token, :status_code, :response, :headers, :retry_after, keyword_init: true)

      # What the fingerprint covers: the method, the target (path and query as the client sent them, bytes) and
      # the body (bytes); json says whether the body counts by its canonical JSON.
      Request = Struct.new(:method, :target, :body, :json, keyword_init: true) do
        # The target as text for jsonb_build_object: Latin-1 keeps every byte, so two targets never read the same.
        def target_text
          target.b.force_encoding(Encoding::ISO_8859_1).encode(Encoding::UTF_8)
        end

        # method || ' ' || target || '\n' || body: the bytes fingerprint.
        def as_bytes
          "#{method} ".b << target.b << "\n".b << body.b
        end
      end

      module_function

      # Claims the key on conn. restart, in transactional mode, begins the transaction afresh after the JSON claim
      # failed (the failed statement aborted it; it had written nothing).
      def claim(conn, scope, key, request, lease, wait, restart: nil)
        if request.json && (text = json_text(request.body))
          begin
            return run_claim(conn, CLAIM_JSON, [scope, key, request.method, request.target_text, text, lease, wait])
          rescue PG::Error => e
            raise unless NOT_JSONB.include?(sqlstate(e))

            # Cheaper than a SAVEPOINT around every JSON claim, in the rare case it is needed.
            restart&.call
          end
        end
        run_claim(conn, CLAIM_BYTES, [scope, key, binary(request.as_bytes), lease, wait])
      end

      # Stores the answer: status, body bytes (an empty body as NULL), the allow-listed headers (name => value).
      def finish(conn, scope, key, token, status, body, headers, retention)
        conn.exec_params(FINISH, [scope, key, token.to_s, status.to_s, body.empty? ? nil : binary(body),
                                  JSON.generate(headers), retention])
        nil
      end

      # Gives the key back; false when the token no longer owns it (another request took it over).
      def release(conn, scope, key, token)
        conn.exec_params(RELEASE, [scope, key, token.to_s]).getvalue(0, 0) == "t"
      end

      # The SQLSTATE of a server error, nil for a client-side one (a lost connection).
      def sqlstate(error)
        error.respond_to?(:result) && error.result ? error.result.error_field(PG::PG_DIAG_SQLSTATE) : nil
      end

      # The body as text for ::jsonb, or nil when PostgreSQL could not take it as text at all (invalid UTF-8, or
      # a NUL byte) or could only fail as JSON (an empty body): the bytes fingerprint those. The same test in
      # every idem_keys middleware.
      def json_text(body)
        return nil if body.empty? || body.include?("\0")

        text = body.dup.force_encoding(Encoding::UTF_8)
        text.valid_encoding? ? text : nil
      end

      def run_claim(conn, sql, params)
        row = conn.exec_params(sql, params)[0]
        raise PG::Error, "idem_claim returned no row" if row.nil? # a SELECT of one call always returns one row

        response = row["response_bytes"]
        Claim.new(outcome: row["outcome"], token: row["token"]&.to_i, status_code: row["status_code"]&.to_i,
                  response: response && PG::Connection.unescape_bytea(response),
                  headers: row["headers"] && JSON.parse(row["headers"]), retry_after: row["retry_after"]&.to_i)
      end

      def binary(bytes)
        { value: bytes, type: BYTEA, format: 1 }
      end
      private_class_method :run_claim, :binary
    end
  end
end
