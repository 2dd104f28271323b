-- idem_fingerprint in SQL, for the portable edition: byte for byte the extension's (src/fingerprint/mod.rs).
-- A jsonb request's fingerprint is SHA-256 of its jsonb_out text in the server's encoding, with trailing
-- fractional zeros dropped from every number outside a string (1.0 = 1, -0.0 = 0) and nothing else changed.
-- jsonb_out writes no exponent and no negative zero, and digits outside strings only in numbers.

-- One regexp_replace does it: each JSON string is matched whole and put back as it is (\1), and each number
-- with a fractional part loses its trailing zeros (\2: some non-zero digit remains; \3: only zeros, so the
-- point goes too). Most requests have no such number, which the cheaper tests in front find out first: a text
-- without a '.' has no fraction at all (strpos, a byte scan), else the short pattern looks for a trailing zero.
-- PL/pgSQL, not a SQL-bodied function: PostgreSQL inlines no STRICT SQL function whose body is not strict
-- itself (this CASE is not), and runs a SQL function it does not inline by reading and planning its body
-- on every call. A PL/pgSQL expression is planned once per session.
CREATE OR REPLACE FUNCTION idem_fingerprint(request jsonb) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    text_form text := request::text;
BEGIN
    RETURN pg_catalog.sha256(pg_catalog.convert_to(
        CASE WHEN pg_catalog.strpos(text_form, '.') = 0
               OR text_form OPERATOR(pg_catalog.!~) '[0-9]\.[0-9]*0(?![0-9])' THEN text_form
             ELSE pg_catalog.regexp_replace(text_form,
                    '("(?:[^"\\]|\\.)*")|(-?[0-9]+\.[0-9]*[1-9])0+(?![0-9])|(-?[0-9]+)\.0+(?![0-9])', '\1\2\3', 'g')
        END,
        pg_catalog.getdatabaseencoding()));
END
$$;

CREATE OR REPLACE FUNCTION idem_fingerprint(request bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN pg_catalog.sha256(request);

-- The fingerprint of idem_claim's body form (request bytea, is_json): the jsonb form's where is_json and the
-- bytes are JSON that jsonb accepts, the bytea form's otherwise, as the extension decides
-- (src/api/claim.rs): UTF-8 without NUL, and on a database whose encoding is not UTF8 only ASCII. The
-- exception block is a subtransaction that writes nothing (no transaction id, no lock).
CREATE OR REPLACE FUNCTION idem_keys_body_fingerprint(request bytea, is_json boolean) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    body text;
BEGIN
    IF is_json THEN
        BEGIN
            body := pg_catalog.convert_from(request, 'UTF8');
            IF pg_catalog.getdatabaseencoding() = 'UTF8' OR pg_catalog.length(body) = pg_catalog.octet_length(request) THEN
                RETURN idem_fingerprint(body::jsonb);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            NULL; -- not UTF-8, or not JSON that jsonb accepts: the bytes' fingerprint
        END;
    END IF;
    RETURN pg_catalog.sha256(request);
END
$$;

-- The fingerprint of idem_claim's HTTP form (method, target, request bytea, is_json), as the middlewares
-- fingerprint a request (contract/sql.json) and the extension computes it (src/api/claim.rs): with is_json and
-- a body that is JSON jsonb accepts, that of jsonb_build_object('method', method, 'target', target, 'body',
-- the body); otherwise sha256 of method || ' ' || target || E'\n' || the body, in UTF-8.
CREATE OR REPLACE FUNCTION idem_keys_request_fingerprint(method text, target text, request bytea, is_json boolean)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    body text;
BEGIN
    IF is_json THEN
        BEGIN
            body := pg_catalog.convert_from(request, 'UTF8');
            IF pg_catalog.getdatabaseencoding() = 'UTF8' OR pg_catalog.length(body) = pg_catalog.octet_length(request) THEN
                RETURN idem_fingerprint(pg_catalog.jsonb_build_object('method', method, 'target', target, 'body', body::jsonb));
            END IF;
        EXCEPTION WHEN OTHERS THEN
            NULL; -- not UTF-8, or not JSON that jsonb accepts: the bytes' fingerprint
        END;
    END IF;
    RETURN pg_catalog.sha256(pg_catalog.convert_to(method || ' ' || target || E'\n', 'UTF8') || request);
END
$$;
