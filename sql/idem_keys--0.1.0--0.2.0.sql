-- idem_keys 0.1.0 -> 0.2.0: checkpoints (recovery points as data), the server-side wait of idem_claim, and
-- the sweeper's record in idem_stats (idem_sweep_status).
-- Every change here must leave the catalog equal to a fresh 0.2.0 install (tests/upgrade checks it).
\echo Use "ALTER EXTENSION idem_keys UPDATE TO '0.2.0'" to load this file. \quit

-- The CHECK constraints go: PostgreSQL recompiles each one for every INSERT and UPDATE statement, 17% of a
-- claim + finish cycle; the functions, the table's only writers, enforce the same invariants.
ALTER TABLE @extschema@.idem_keys
    ADD COLUMN checkpoint text,
    ADD COLUMN checkpoint_state jsonb,
    DROP CONSTRAINT idem_keys_key_length,
    DROP CONSTRAINT idem_keys_scope_length,
    DROP CONSTRAINT idem_keys_attempt_positive,
    DROP CONSTRAINT idem_keys_finished_has_answer;
COMMENT ON COLUMN @extschema@.idem_keys.checkpoint IS 'Last recovery point the owner recorded (idem_checkpoint); carried over to the owner that recovers the key.';
COMMENT ON COLUMN @extschema@.idem_keys.checkpoint_state IS 'State recorded with the last checkpoint, or NULL.';

-- New trailing fields: code that names fields ((r).outcome, (r).*) keeps working.
ALTER TYPE @extschema@.idem_result ADD ATTRIBUTE checkpoint text, ADD ATTRIBUTE checkpoint_state jsonb;
COMMENT ON TYPE @extschema@.idem_result IS
    'Result of idem_claim and idem_lookup: outcome is claimed, replay, in_progress, mismatch or recovered; token is set only for claimed and recovered; checkpoint and checkpoint_state only for recovered and in_progress.';

-- idem_claim gains `wait`. A new trailing parameter with a default cannot be added in place (it would be a
-- second, ambiguous overload), so the old signatures go. Calls that pass 3 or 4 arguments bind to the new
-- ones unchanged. (The library keeps the 0.1.0 C symbols, so a 0.1.0 catalog works with it until this runs.)
DROP FUNCTION @extschema@.idem_claim(text, text, jsonb, interval);
DROP FUNCTION @extschema@.idem_claim(text, text, bytea, interval);

CREATE FUNCTION @extschema@.idem_claim(
    "scope" text, "key" text, "request" bytea, "lease" interval DEFAULT NULL, "wait" interval DEFAULT '0'
) RETURNS @extschema@.idem_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'idem_claim_bytea_wait_wrapper';

CREATE FUNCTION @extschema@.idem_claim(
    "scope" text, "key" text, "request" jsonb, "lease" interval DEFAULT NULL, "wait" interval DEFAULT '0'
) RETURNS @extschema@.idem_result
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'idem_claim_jsonb_wait_wrapper';

CREATE FUNCTION @extschema@.idem_checkpoint(
    "scope" text, "key" text, "token" bigint, "point" text, "state" jsonb DEFAULT NULL
) RETURNS void
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'idem_checkpoint_wrapper';

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, jsonb, interval, interval) IS
    'Claim an idempotency key for a JSON request: claimed (you own it: run, then idem_finish), replay (stored answer), in_progress (retry after retry_after s), mismatch (same key, other request), recovered (previous owner died: resume from checkpoint, reconcile, then finish). wait => interval waits that long for a busy key to finish. Cast the request: $3::jsonb.';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, interval) IS
    'Claim an idempotency key for a raw request body; as idem_claim(text, text, jsonb, interval, interval). Cast the request: $3::bytea.';
COMMENT ON FUNCTION @extschema@.idem_checkpoint(text, text, bigint, text, jsonb) IS
    'Record how far the owner of a claimed key got (point, optional state); a recovering owner gets it back in idem_result.checkpoint. Only the current token may checkpoint; does not extend the lease.';

-- The sweeper's record (shared memory, with shared_preload_libraries); idem_stats gains its columns, which
-- changes its result type, so it is dropped and created again.
CREATE FUNCTION @extschema@.idem_sweep_status() RETURNS TABLE (
    "last_sweep_at" timestamp with time zone, "last_sweep_removed" bigint, "removed_since_start" bigint,
    "sweeps_since_start" bigint, "longest_batch" interval, "sweep_errors" bigint,
    "last_error_at" timestamp with time zone
)
STRICT STABLE SECURITY DEFINER PARALLEL SAFE
SET search_path TO pg_catalog, @extschema@, pg_temp
LANGUAGE c
AS 'MODULE_PATHNAME', 'idem_sweep_status_wrapper';

DROP FUNCTION @extschema@.idem_stats();
CREATE FUNCTION @extschema@.idem_stats(
    OUT in_progress bigint, OUT stale bigint, OUT finished bigint, OUT expired bigint,
    OUT oldest_in_progress_age interval, OUT table_bytes bigint,
    OUT last_sweep_at timestamptz, OUT last_sweep_removed bigint, OUT removed_since_start bigint,
    OUT sweep_errors bigint)
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, @extschema@, pg_temp
AS $$
    WITH clock AS (SELECT clock_timestamp() AS now),
         keys AS (
            SELECT count(*) FILTER (WHERE k.finished_at IS NULL AND k.lease_ends_at > clock.now) AS in_progress,
                   count(*) FILTER (WHERE k.finished_at IS NULL AND k.lease_ends_at <= clock.now) AS stale,
                   count(*) FILTER (WHERE k.finished_at IS NOT NULL AND k.expires_at > clock.now) AS finished,
                   count(*) FILTER (WHERE k.finished_at IS NOT NULL AND k.expires_at <= clock.now) AS expired,
                   max(clock.now - k.created_at) FILTER (WHERE k.finished_at IS NULL) AS oldest
              FROM clock LEFT JOIN idem_keys AS k ON true
             GROUP BY clock.now)
    SELECT keys.in_progress, keys.stale, keys.finished, keys.expired, keys.oldest,
           pg_total_relation_size('idem_keys'),
           s.last_sweep_at, s.last_sweep_removed, s.removed_since_start, s.sweep_errors
      FROM keys, idem_sweep_status() AS s
$$;

REVOKE ALL ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_sweep_status() FROM PUBLIC;
COMMENT ON FUNCTION @extschema@.idem_stats() IS
    'Counts of in-progress, stale, finished and expired-unswept keys, age of the oldest in-progress key, the table size in bytes, and this database''s sweeps since the server started (NULL without shared_preload_libraries). Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_sweep_status() IS
    'This database''s sweeps since the server started (worker, pg_cron or manual): when the last finished and what it removed, totals, longest batch, errors. Needs shared_preload_libraries = ''idem_keys''; NULLs otherwise. Revoked from PUBLIC.';
