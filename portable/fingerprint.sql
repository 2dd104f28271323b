-- idem_fingerprint in SQL, for the portable edition: byte for byte the extension's (src/fingerprint/mod.rs).
-- A jsonb request's fingerprint is SHA-256 of its jsonb_out text in the server's encoding, with trailing
-- fractional zeros dropped from every number outside a string (1.0 = 1, -0.0 = 0) and nothing else changed.
-- The text is cut into tokens (a JSON string, a number, or a run of anything else) in order; jsonb_out writes a
-- '-' only where a number starts and digits outside strings only in numbers.

CREATE OR REPLACE FUNCTION idem_keys_canonical_number(number text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN CASE
    WHEN pg_catalog.strpos(number, '.') = 0 THEN number
    WHEN pg_catalog.rtrim(pg_catalog.rtrim(number, '0'), '.') = '-0' THEN '0'
    ELSE pg_catalog.rtrim(pg_catalog.rtrim(number, '0'), '.')
END;

CREATE OR REPLACE FUNCTION idem_fingerprint(request jsonb) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.sha256(pg_catalog.convert_to(
    (SELECT pg_catalog.string_agg(
                CASE WHEN t.token[1] ~ '^-?[0-9]' THEN idem_keys_canonical_number(t.token[1])
                     ELSE t.token[1] END, '' ORDER BY t.n)
       FROM pg_catalog.regexp_matches(request::text, '"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|[^"0-9-]+', 'g')
            WITH ORDINALITY AS t(token, n)),
    pg_catalog.getdatabaseencoding()));

CREATE OR REPLACE FUNCTION idem_fingerprint(request bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.sha256(request);
