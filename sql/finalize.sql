-- idem_keys: the reporting functions, comments and privileges. Runs after the generated CREATE FUNCTIONs.

-- Set-based reads stay SQL: Rust would add nothing but a copy of the query.
CREATE FUNCTION @extschema@.idem_stale(older_than interval DEFAULT NULL, max_rows integer DEFAULT 100)
RETURNS TABLE (scope text, key text, token bigint, attempt integer, claimed_at timestamptz,
               lease_ends_at timestamptz)
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, @extschema@, pg_temp
AS $$
BEGIN
    IF older_than < interval '0' THEN
        RAISE EXCEPTION 'idem_stale: older_than must not be negative' USING ERRCODE = '22023',
            HINT = 'Pass NULL or an interval such as ''5 minutes''.';
    END IF;
    IF max_rows IS NULL OR max_rows <= 0 THEN
        RAISE EXCEPTION 'idem_stale: max_rows must be a positive integer' USING
            ERRCODE = CASE WHEN max_rows IS NULL THEN '22004' ELSE '22023' END,
            HINT = 'Reconcile in pages of e.g. 100 rows.';
    END IF;
    RETURN QUERY
        SELECT k.scope, k.key, k.token, k.attempt, k.claimed_at, k.lease_ends_at
          FROM idem_keys AS k
         WHERE k.finished_at IS NULL
           AND k.lease_ends_at <= clock_timestamp() - coalesce(older_than, interval '0')
         ORDER BY k.lease_ends_at, k.scope, k.key
         LIMIT max_rows;
END
$$;

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

-- The pg_cron way to sweep: a committed transaction per batch and idem_keys.sweep_delay between them, as the
-- background worker does, so a backlog never becomes one long transaction and claims keep their latency.
-- PL/pgSQL, because a procedure that commits needs a procedural language (pgrx functions cannot COMMIT).
-- SECURITY INVOKER and no SET clause, because PostgreSQL refuses COMMIT in a procedure with either; so every
-- name is schema-qualified. The rows are deleted by idem_sweep_step, which is SECURITY DEFINER.
CREATE PROCEDURE @extschema@.idem_sweep_paced(
    batch_size integer DEFAULT NULL, delay interval DEFAULT NULL, INOUT removed bigint DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
    progress @extschema@.idem_sweep_progress;
    pause double precision;
BEGIN
    IF delay < interval '0' THEN
        RAISE EXCEPTION 'idem_sweep_paced: delay must not be negative' USING ERRCODE = '22023',
            HINT = 'Pass NULL for idem_keys.sweep_delay, or an interval such as ''5 milliseconds''.';
    END IF;
    LOOP
        progress := @extschema@.idem_sweep_step(progress, batch_size);
        COMMIT;
        EXIT WHEN progress.done;
        -- Read after the first step, which loaded the library that defines the setting.
        pause := pg_catalog.date_part('epoch',
            coalesce(delay, pg_catalog.current_setting('idem_keys.sweep_delay')::pg_catalog.interval));
        IF pause > 0 THEN
            PERFORM pg_catalog.pg_sleep(pause);
        END IF;
    END LOOP;
    removed := progress.removed;
END
$$;

-- The application verbs are callable by every role (SECURITY DEFINER: they need no table privilege).
-- The maintenance and reporting functions see or delete every tenant's keys, so the administrator grants
-- them on purpose, e.g. GRANT EXECUTE ON FUNCTION idem_sweep(integer) TO janitor.
REVOKE ALL ON FUNCTION @extschema@.idem_sweep(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_sweep_step(@extschema@.idem_sweep_progress, integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE @extschema@.idem_sweep_paced(integer, interval, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_stale(interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_sweep_status() FROM PUBLIC;

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, jsonb, interval, interval) IS
    'Claim an idempotency key for a JSON request: claimed (you own it: run, then idem_finish), replay (stored answer), in_progress (retry after retry_after s), mismatch (same key, other request), recovered (previous owner died: resume from checkpoint, reconcile, then finish). wait => interval waits that long for a busy key to finish. Cast the request: $3::jsonb.';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, interval) IS
    'Claim an idempotency key for a raw request body; as idem_claim(text, text, jsonb, interval, interval). Cast the request: $3::bytea.';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, boolean, interval, interval) IS
    'Claim an idempotency key for a request body of any kind, in one call: with is_json, bytes that parse as JSON are fingerprinted as the jsonb form does, and anything else as the bytea form does; as idem_claim(text, text, jsonb, interval, interval). Cast the request: $3::bytea, $4::boolean.';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, text, text, bytea, boolean, interval, interval) IS
    'Claim an idempotency key for an HTTP request, fingerprinted as the middlewares do, in one call: with is_json, a body that is JSON gets the fingerprint of jsonb_build_object(''method'', method, ''target'', target, ''body'', request::jsonb), any other request that of method || '' '' || target || E''\n'' || request; as idem_claim(text, text, jsonb, interval, interval).';
COMMENT ON FUNCTION @extschema@.idem_checkpoint(text, text, bigint, text, jsonb) IS
    'Record how far the owner of a claimed key got (point, optional state); a recovering owner gets it back in idem_result.checkpoint. Only the current token may checkpoint; does not extend the lease.';
COMMENT ON FUNCTION @extschema@.idem_finish(text, text, bigint, integer, jsonb, jsonb, interval) IS
    'Store the JSON answer of a claimed key and end its lease. Only the current token may finish; the same finish again is a no-op.';
COMMENT ON FUNCTION @extschema@.idem_finish(text, text, bigint, integer, bytea, jsonb, interval) IS
    'Store the raw answer of a claimed key and end its lease; as the jsonb form.';
COMMENT ON FUNCTION @extschema@.idem_release(text, text, bigint) IS
    'Give a claim up (failure before any side effect, or a retryable 429/503): the next claim starts afresh. False if the token no longer owns the key.';
COMMENT ON FUNCTION @extschema@.idem_lookup(text, text) IS
    'Read a key without claiming it: replay or in_progress, or NULL when unknown or expired. Never returns the token. PARALLEL RESTRICTED: it sees this transaction''s claims, written or not yet.';
COMMENT ON FUNCTION @extschema@.idem_sweep(integer) IS
    'Delete expired answers and claims abandoned past idem_keys.abandon_after in one transaction, batch_size rows per statement (a full batch also takes the rest of the timestamp it ended on, so ties cost no rescans); returns the count. For a large backlog, CALL idem_sweep_paced(). Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_sweep_step(@extschema@.idem_sweep_progress, integer) IS
    'One batch of idem_sweep_paced: deletes from where progress says (NULL: a new sweep) and returns where the next batch starts; done when the batch came back short (the sweep is then recorded). Revoked from PUBLIC.';
COMMENT ON PROCEDURE @extschema@.idem_sweep_paced(integer, interval, bigint) IS
    'Delete expired answers and abandoned claims like idem_sweep, but commit after every batch and rest delay (NULL: idem_keys.sweep_delay) between batches; returns the count in removed. For pg_cron: CALL idem_sweep_paced(). Not inside a transaction block (2D000). Needs EXECUTE on idem_sweep_step too. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_stale(interval, integer) IS
    'Unfinished keys whose lease ended at least older_than ago, oldest first, for a reconciler that asks its provider and then finishes them with the token. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_stats() IS
    'Counts of in-progress, stale, finished and expired-unswept keys, age of the oldest in-progress key, the table size in bytes, and this database''s sweeps since the server started (NULL without shared_preload_libraries). Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_sweep_status() IS
    'This database''s sweeps since the server started (worker, pg_cron or manual): when the last finished and what it removed, totals, longest batch, errors. Needs shared_preload_libraries = ''idem_keys''; NULLs otherwise. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_fingerprint(jsonb) IS
    'SHA-256 of a jsonb request in canonical form: equal jsonb values give equal fingerprints.';
COMMENT ON FUNCTION @extschema@.idem_fingerprint(bytea) IS
    'SHA-256 of a raw request body (same as sha256(bytea)).';
