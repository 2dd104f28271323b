-- idem_fingerprint in SQL, for the portable edition: byte for byte the extension's (src/fingerprint/mod.rs).
-- A jsonb request's fingerprint is SHA-256 of its jsonb_out text in the server's encoding, with trailing
-- fractional zeros dropped from every number outside a string (1.0 = 1, -0.0 = 0) and nothing else changed.
-- jsonb_out writes no exponent and no negative zero, and digits outside strings only in numbers.

-- One regexp_replace does it: each JSON string is matched whole and put back as it is (\1), and each number
-- with a fractional part loses its trailing zeros (\2: some non-zero digit remains; \3: only zeros, so the
-- point goes too). Most requests have no such number, which the cheaper pattern in front finds out first.
CREATE OR REPLACE FUNCTION idem_fingerprint(request jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.sha256(pg_catalog.convert_to(
    CASE WHEN request::text OPERATOR(pg_catalog.!~) '[0-9]\.[0-9]*0(?![0-9])' THEN request::text
         ELSE pg_catalog.regexp_replace(request::text,
                '("(?:[^"\\]|\\.)*")|(-?[0-9]+\.[0-9]*[1-9])0+(?![0-9])|(-?[0-9]+)\.0+(?![0-9])', '\1\2\3', 'g')
    END,
    pg_catalog.getdatabaseencoding()));

CREATE OR REPLACE FUNCTION idem_fingerprint(request bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.sha256(request);
