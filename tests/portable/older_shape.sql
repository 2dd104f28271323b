-- An older shape to upgrade from (tests/portable/run.sh), after 0.1.0's table, sequence, indexes and result
-- type, which run.sh takes from the released sql/idem_keys--0.1.0.sql (CHECK constraints, the database's
-- collation, no checkpoint columns, no hash index, no checkpoint fields): functions with 0.1.0's signatures
-- (idem_claim without wait; idem_stats with fewer columns), as a team would have made them by hand from that
-- release; a grant an administrator gave; and keys in every state.
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
