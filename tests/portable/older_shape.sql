-- An older shape to upgrade from (tests/portable/run.sh): idem_keys 0.1.0's table (CHECK constraints, the
-- database's collation, no checkpoint columns, no hash index), its result type without the checkpoint fields,
-- functions with 0.1.0's signatures (idem_claim without wait; idem_stats with fewer columns), as a team would
-- have made it by hand from that release; a grant an administrator gave; and keys in every state.
CREATE SEQUENCE idem_keys_token_seq AS bigint;
CREATE TABLE idem_keys (
    scope          text        NOT NULL,
    key            text        NOT NULL,
    fingerprint    bytea       NOT NULL,
    token          bigint      NOT NULL,
    attempt        integer     NOT NULL,
    created_at     timestamptz NOT NULL,
    claimed_at     timestamptz NOT NULL,
    lease_ends_at  timestamptz NOT NULL,
    finished_at    timestamptz,
    expires_at     timestamptz,
    status_code    integer,
    response       jsonb,
    response_bytes bytea,
    headers        jsonb,
    CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key),
    CONSTRAINT idem_keys_key_length CHECK (char_length(key) >= 1 AND char_length(key) <= 255),
    CONSTRAINT idem_keys_scope_length CHECK (char_length(scope) <= 255),
    CONSTRAINT idem_keys_attempt_positive CHECK (attempt >= 1)
);
CREATE INDEX idem_keys_expires_at_idx ON idem_keys (expires_at) WHERE finished_at IS NOT NULL;
CREATE INDEX idem_keys_lease_ends_at_idx ON idem_keys (lease_ends_at) WHERE finished_at IS NULL;
REVOKE ALL ON TABLE idem_keys FROM PUBLIC;
REVOKE ALL ON SEQUENCE idem_keys_token_seq FROM PUBLIC;
CREATE TYPE idem_result AS (
    outcome text, token bigint, attempt integer, status_code integer, response jsonb, response_bytes bytea,
    headers jsonb, retry_after integer, created_at timestamptz
);
CREATE FUNCTION idem_claim(scope text, key text, request jsonb, lease interval DEFAULT NULL) RETURNS idem_result
LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN RAISE EXCEPTION 'the 0.1.0 idem_claim'; END $$;
CREATE FUNCTION idem_claim(scope text, key text, request bytea, lease interval DEFAULT NULL) RETURNS idem_result
LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN RAISE EXCEPTION 'the 0.1.0 idem_claim'; END $$;
CREATE FUNCTION idem_stats(OUT in_progress bigint, OUT finished bigint) RETURNS record
LANGUAGE sql SECURITY DEFINER AS $$ SELECT 0::bigint, 0::bigint $$;
REVOKE ALL ON FUNCTION idem_stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION idem_stats() TO janitor;
-- A finished key whose request was {"amount": 1.50}, fingerprinted as idem_keys does, an open claim, and an
-- expired answer.
SELECT setval('idem_keys_token_seq', 41);
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at, finished_at,
                       expires_at, status_code, response)
VALUES ('old', 'finished', sha256(convert_to('{"amount": 1.5}', 'UTF8')), nextval('idem_keys_token_seq'), 1, now(),
        now(), now() + interval '5 minutes', now(), now() + interval '1 day', 201, '{"id": 1}'),
       ('old', 'expired', sha256(convert_to('{}', 'UTF8')), nextval('idem_keys_token_seq'), 1, now(), now(),
        now() + interval '5 minutes', now(), now() - interval '1 day', 200, '{}');
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
VALUES ('old', 'open', sha256(convert_to('{}', 'UTF8')), nextval('idem_keys_token_seq'), 1, now(), now(),
        now() + interval '5 minutes');
