-- idem_lookup, idem_sweep, idem_stale, idem_stats.
\set SHOW_CONTEXT never
-- counts below are of this file's keys only
DELETE FROM idem_keys;
SELECT idem_lookup('ls', 'nobody') IS NULL AS unknown_is_null;
SELECT (idem_claim('ls', 'live', '{}'::jsonb)).outcome;
SELECT (r).outcome, (r).token, (r).attempt, (r).retry_after > 0 AS waiting FROM (SELECT idem_lookup('ls', 'live') r) s;
SELECT (idem_claim('ls', 'dead', '{}'::jsonb)).outcome;
UPDATE idem_keys SET lease_ends_at = now() - interval '10 minutes' WHERE key = 'dead';
SELECT (r).outcome, (r).retry_after FROM (SELECT idem_lookup('ls', 'dead') r) s;
SELECT scope, key, attempt FROM idem_stale() WHERE scope = 'ls';
SELECT scope, key FROM idem_stale(older_than => '1 hour') WHERE scope = 'ls';
SELECT idem_finish('ls', 'live', (SELECT token FROM idem_keys WHERE key = 'live'), 200, '{"n": 1}'::jsonb);
SELECT (r).outcome, (r).status_code, (r).response FROM (SELECT idem_lookup('ls', 'live') r) s;
-- expire the answer and abandon the dead claim: one sweep removes both, live work stays
UPDATE idem_keys SET expires_at = now() - interval '1 second' WHERE key = 'live';
SELECT idem_lookup('ls', 'live') IS NULL AS expired_is_null;
SET idem_keys.abandon_after = '5min';
SELECT in_progress, stale, finished, expired FROM idem_stats();
SELECT idem_sweep(batch_size => 1) AS swept;
SELECT key FROM idem_keys ORDER BY key;
SELECT in_progress, stale, finished, expired, oldest_in_progress_age IS NULL AS none_in_progress,
       table_bytes > 0 AS has_size FROM idem_stats();
RESET idem_keys.abandon_after;
-- A backlog swept in one call, batch by batch. Each batch starts where the previous one ended, so keys that
-- expired at the same instant as the end of a batch must still be deleted by the next one: three finished
-- keys share one expiry, two another, and three abandoned claims share one lease end, across batches of 2.
DO $$
DECLARE
    t bigint;
BEGIN
    FOR i IN 1..7 LOOP
        t := (idem_claim('backlog', 'f' || i, '{}'::jsonb)).token;
        PERFORM idem_finish('backlog', 'f' || i, t, 200, '{}'::jsonb);
    END LOOP;
    FOR i IN 1..4 LOOP
        PERFORM idem_claim('backlog', 'u' || i, '{}'::jsonb);
    END LOOP;
END $$;
UPDATE idem_keys SET expires_at = CASE WHEN key IN ('f1', 'f2', 'f3') THEN now() - interval '1 hour'
                                       WHEN key IN ('f4', 'f5') THEN now() - interval '10 minutes'
                                       WHEN key = 'f6' THEN now() - interval '1 minute'
                                       ELSE expires_at END
 WHERE scope = 'backlog' AND key LIKE 'f%';
UPDATE idem_keys SET lease_ends_at = now() - interval '10 days'
 WHERE scope = 'backlog' AND key IN ('u1', 'u2', 'u3');
SELECT idem_sweep(batch_size => 2) AS swept;
SELECT key FROM idem_keys WHERE scope = 'backlog' ORDER BY key;
-- idem_lookup is PARALLEL RESTRICTED: in a parallel query it runs in the leader, which holds the
-- transaction's own claim (written or not yet: the write-once claim), in parallel mode, with the query's
-- snapshot (a new one is forbidden there).
SELECT CASE WHEN current_setting('server_version_num')::int >= 160000
            THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END AS parallel_setting \gset
SELECT set_config(:'parallel_setting', 'on', false) AS forced;
CREATE TABLE par_keys (key text);
INSERT INTO par_keys VALUES ('k'), ('absent');
BEGIN;
SET LOCAL parallel_setup_cost = 0;
SET LOCAL parallel_tuple_cost = 0;
SET LOCAL min_parallel_table_scan_size = 0;
SELECT (idem_claim('par', 'k', '{}'::jsonb)).outcome;
SELECT (idem_lookup('par', 'k')).outcome;
-- the keys come from a parallel scan; the leader looks each one up
EXPLAIN (COSTS OFF) SELECT key, (idem_lookup('par', key)).outcome FROM par_keys;
SELECT key, (idem_lookup('par', key)).outcome FROM par_keys ORDER BY key;
ROLLBACK;
DROP TABLE par_keys;
SELECT set_config(:'parallel_setting', 'off', false) AS unforced;
