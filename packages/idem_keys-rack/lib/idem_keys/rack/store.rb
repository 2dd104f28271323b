# frozen_string_literal: true

require "json"
require "pg"

module IdemKeys
  module Rack
    # The SQL the middleware runs: idem_claim, idem_finish and idem_release, the texts every idem_keys middleware
    # sends (contract/sql.json), bind parameters only, on a PG::Connection the database adapter hands over. By
    # default each runs as one statement that commits on its own: the claim is visible to every duplicate before
    # the handler starts, and the answer is durable before the client sees it. In transactional mode they run
    # inside the request's transaction.
    module Store
      # Fields by name, never r.*: a newer idem_result may grow columns. Durations are seconds (a double
      # precision, or NULL for the server's setting).
      RESULT = "r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after"
      CLAIM_JSON = "SELECT #{RESULT} FROM idem_claim($1, $2, jsonb_build_object('method', $3::text, 'target', " \
                   "$4::text, 'body', $5::jsonb), lease => make_interval(secs => $6::float8), " \
                   "wait => make_interval(secs => $7::float8)) AS r"
      CLAIM_BYTES = "SELECT #{RESULT} FROM idem_claim($1, $2, $3::bytea, lease => make_interval(secs => " \
                    "$4::float8), wait => make_interval(secs => $5::float8)) AS r"
      # The bytea overload: a replay repeats the body byte for byte, where jsonb would reorder and respace it.
      FINISH = "SELECT idem_finish($1, $2, $3::bigint, $4::integer, $5::bytea, headers => $6::jsonb, " \
               "retention => make_interval(secs => $7::float8))"
      RELEASE = "SELECT idem_release($1, $2, $3::bigint) AS released"

      # invalid_text_representation, untranslatable_character, character_not_in_repertoire: the body said JSON
      # but jsonb cannot hold it; its bytes still fingerprint it.
      NOT_JSONB = %w[22P02 22P05 22021].freeze
      # object_not_in_prerequisite_state from idem_finish: another request took the key over (fencing token).
      LEASE_LOST = "55000"
      BYTEA = 17 # the bytea type's oid, for binary parameters

      # What idem_claim answered.
      Claim = Struct.new(:outcome, :token, :status_code, :response, :headers, :retry_after, keyword_init: true) do
        # Whether this request now holds the key (new, or taken over from an owner whose lease ended).
        def claimed?
          %w[claimed recovered].include?(outcome) && !token.nil?
        end
      end

      module_function

      # Claims the key on conn for the request's Fingerprint; lease and wait in seconds or nil. restart, in
      # transactional mode, begins the transaction afresh after the JSON claim failed (the failed statement
      # aborted it; it had written nothing).
      def claim(conn, scope, key, fingerprint, lease, wait, restart: nil)
        if fingerprint.json && (text = json_text(fingerprint.body))
          begin
            return run_claim(conn, CLAIM_JSON, [scope, key, fingerprint.method, fingerprint.target_text, text,
                                                seconds(lease), seconds(wait)])
          rescue PG::Error => e
            raise unless NOT_JSONB.include?(sqlstate(e))

            # Cheaper than a SAVEPOINT around every JSON claim, in the rare case it is needed.
            restart&.call
          end
        end
        run_claim(conn, CLAIM_BYTES, [scope, key, binary(fingerprint.as_bytes), seconds(lease), seconds(wait)])
      end

      # Stores the answer: status, body bytes (an empty body as NULL), the allow-listed headers (name => value),
      # retention in seconds or nil.
      def finish(conn, scope, key, token, status, body, headers, retention)
        conn.exec_params(FINISH, [scope, key, token.to_s, status.to_s, body.empty? ? nil : binary(body),
                                  JSON.generate(headers), seconds(retention)])
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

      # A duration for make_interval(secs => $n::float8): Float#to_s ("1.5", "1.0e-05") is valid float8 input.
      def seconds(value)
        value&.to_f&.to_s
      end

      def binary(bytes)
        { value: bytes, type: BYTEA, format: 1 }
      end
      private_class_method :run_claim, :seconds, :binary
    end
  end
end
