-- CALL idem_sweep_paced(): the sweep for pg_cron, one committed transaction per batch.
\set SHOW_CONTEXT never
-- counts below are of this file's keys only
DELETE FROM idem_keys;
-- A backlog as in lookup_sweep.sql: finished keys sharing expiries and abandoned claims sharing a lease end,
-- so ties fall on batch ends, plus a live claim and a live answer that must stay.
DO $$
DECLARE
    t bigint;
BEGIN
    FOR i IN 1..7 LOOP
        t := (idem_claim('paced', 'f' || i, '{}'::jsonb)).token;
        PERFORM idem_finish('paced', 'f' || i, t, 200, '{}'::jsonb);
    END LOOP;
    FOR i IN 1..4 LOOP
        PERFORM idem_claim('paced', 'u' || i, '{}'::jsonb);
    END LOOP;
END $$;
CREATE FUNCTION expire_backlog() RETURNS void LANGUAGE sql AS $$
    UPDATE idem_keys SET expires_at = CASE WHEN key IN ('f1', 'f2', 'f3') THEN now() - interval '1 hour'
                                           WHEN key IN ('f4', 'f5') THEN now() - interval '10 minutes'
                                           ELSE now() - interval '1 minute' END
     WHERE scope = 'paced' AND key IN ('f1', 'f2', 'f3', 'f4', 'f5', 'f6');
    UPDATE idem_keys SET lease_ends_at = now() - interval '10 days'
     WHERE scope = 'paced' AND key IN ('u1', 'u2', 'u3');
$$;
SELECT expire_backlog();
CREATE TEMP TABLE before AS SELECT scope, key, token, expires_at, lease_ends_at FROM idem_keys;

-- Bad input: the SQLSTATE, and nothing deleted.
CALL idem_sweep_paced(batch_size => 0);
\echo :LAST_ERROR_SQLSTATE
CALL idem_sweep_paced(delay => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_sweep_step(NULL, 0);
\echo :LAST_ERROR_SQLSTATE
-- Inside a transaction block it cannot commit: the whole call rolls back.
BEGIN;
CALL idem_sweep_paced(batch_size => 2, delay => '0');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS kept FROM idem_keys;
SELECT count(*) AS changed FROM (SELECT * FROM before EXCEPT SELECT scope, key, token, expires_at, lease_ends_at FROM idem_keys) c;

-- The step alone: the state it returns is where the next batch starts; a short batch is the last.
SELECT (p).removed, (p).done, (p).finished_from < now() - interval '50 minutes' AS after_the_oldest_tie,
       (p).abandoned_from < now() - interval '9 days' AS after_the_abandoned
  FROM (SELECT idem_sweep_step(NULL, 2) AS p) s;
SELECT key FROM idem_keys WHERE scope = 'paced' ORDER BY key;
-- Put them back and sweep with the procedure: 2-row batches over ties lose nothing.
DELETE FROM idem_keys WHERE scope = 'paced';
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
SELECT 'paced', k, idem_fingerprint('{}'::jsonb), nextval('idem_keys_token_seq'), 1, now(), now(),
       now() + interval '5 minutes'
  FROM unnest(ARRAY['f1', 'f2', 'f3', 'f4', 'f5', 'f6', 'f7', 'u1', 'u2', 'u3', 'u4']) AS k;
UPDATE idem_keys SET finished_at = now(), expires_at = now() + interval '1 day', status_code = 200,
                     response = '{}'
 WHERE scope = 'paced' AND key LIKE 'f%';
SELECT expire_backlog();
CALL idem_sweep_paced(batch_size => 2, delay => '1 millisecond');
SELECT key FROM idem_keys WHERE scope = 'paced' ORDER BY key;
-- Nothing left to sweep: removed 0, still a finished sweep.
CALL idem_sweep_paced();
-- An application role may not sweep.
CREATE ROLE regress_idem_paced;
SET ROLE regress_idem_paced;
CALL idem_sweep_paced();
\echo :LAST_ERROR_SQLSTATE
SELECT idem_sweep_step(NULL);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_idem_paced;
DROP FUNCTION expire_backlog();
