-- idem_keys 0.6.0 -> 0.7.0: one claim call for any body, and idem_lookup PARALLEL RESTRICTED.
--   * idem_claim(scope, key, request bytea, is_json boolean, lease, wait): the request's bytes, fingerprinted
--     as the jsonb form does when is_json and they parse as JSON, else as the bytea form does.
--   * idem_claim(scope, key, method text, target text, request bytea, is_json boolean, lease, wait): an HTTP
--     request, fingerprinted as the middlewares fingerprint one, in one call (no retry in the bytea form).
--   * idem_lookup is PARALLEL RESTRICTED: a claim made in a transaction block is written once, with its
--     answer or at commit (the library's write-once claim, idem_keys.write_once), and until then lives in
--     the claiming backend's memory, which a parallel worker cannot see; the leader runs idem_lookup.
-- The library's other changes need no catalog change: a duplicate learns that an open transaction holds a
-- key from a dirty read of the key's row (and a key lock no SQL function can take), in any kind of
-- transaction. The version moves with idem_keys_proxy's, which must equal its partitions'.
-- Every change here must leave the catalog equal to a fresh 0.7.0 install (tests/upgrade checks it).
\echo Use "ALTER EXTENSION idem_keys UPDATE TO '0.7.0'" to load this file. \quit

CREATE FUNCTION @extschema@.idem_claim(
    "scope" text, "key" text, "request" bytea, "is_json" boolean, "lease" interval DEFAULT NULL,
    "wait" interval DEFAULT '0'
) RETURNS @extschema@.idem_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'idem_claim_body_wait_wrapper';

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, boolean, interval, interval) IS
    'Claim an idempotency key for a request body of any kind, in one call: with is_json, bytes that parse as JSON are fingerprinted as the jsonb form does, and anything else as the bytea form does; as idem_claim(text, text, jsonb, interval, interval). Cast the request: $3::bytea, $4::boolean.';

CREATE FUNCTION @extschema@.idem_claim(
    "scope" text, "key" text, "method" text, "target" text, "request" bytea, "is_json" boolean,
    "lease" interval DEFAULT NULL, "wait" interval DEFAULT '0'
) RETURNS @extschema@.idem_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'idem_claim_http_wait_wrapper';

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, text, text, bytea, boolean, interval, interval) IS
    'Claim an idempotency key for an HTTP request, fingerprinted as the middlewares do, in one call: with is_json, a body that is JSON gets the fingerprint of jsonb_build_object(''method'', method, ''target'', target, ''body'', request::jsonb), any other request that of method || '' '' || target || E''\n'' || request; as idem_claim(text, text, jsonb, interval, interval).';

ALTER FUNCTION @extschema@.idem_lookup(text, text) PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.idem_lookup(text, text) IS
    'Read a key without claiming it: replay or in_progress, or NULL when unknown or expired. Never returns the token. PARALLEL RESTRICTED: it sees this transaction''s claims, written or not yet.';
