-- One statement claims 100,000 keys (a backfill, a seeding script) with the default max_locks_per_transaction:
-- holding keys never fills the lock table. Its transaction keeps at most 32 key locks (none for new keys on the
-- extension's direct path, which reads other transactions' rows instead), and still owns every key.
SHOW max_locks_per_transaction;
SELECT outcome, count(*)
  FROM generate_series(1, 100000) AS g, idem_claim('bulk', g::text, jsonb_build_object('n', g))
 GROUP BY outcome;
-- In a transaction block too, and the locks it keeps stay within the bound.
BEGIN;
SELECT outcome, count(*)
  FROM generate_series(1, 1000) AS g, idem_claim('bulk block', g::text, '{}'::jsonb)
 GROUP BY outcome;
SELECT count(*) <= 32 AS within_bound
  FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory';
COMMIT;
-- Every key is one row, owned and unfinished.
SELECT scope, count(*), count(DISTINCT token), bool_and(finished_at IS NULL) AS unfinished
  FROM idem_keys WHERE scope IN ('bulk', 'bulk block') GROUP BY scope ORDER BY scope;
DELETE FROM idem_keys WHERE scope IN ('bulk', 'bulk block');
