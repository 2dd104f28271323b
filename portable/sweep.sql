-- idem_sweep, idem_sweep_step and idem_sweep_status without the background worker (src/api/sweep.rs): the
-- same batches, cursors and tie rule. pg_cron (or any scheduler) calls CALL idem_sweep_paced() instead of the
-- worker (docs/portable.md). Sweeps are recorded in a table, since there is no shared memory to keep them in.

CREATE TABLE IF NOT EXISTS idem_keys_sweep_record (
    only_row            boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    last_sweep_at       timestamptz,
    last_sweep_removed  bigint,
    removed_since_start bigint NOT NULL DEFAULT 0,
    sweeps_since_start  bigint NOT NULL DEFAULT 0,
    longest_batch       interval
);
REVOKE ALL ON TABLE idem_keys_sweep_record FROM PUBLIC;
COMMENT ON TABLE idem_keys_sweep_record IS
    'idem_keys portable edition: what idem_sweep_status() reports, since the edition was installed (the extension keeps it in shared memory since the server started).';

-- One batch of one kind: at most batch_size rows (NULL: every row) whose finished_at IS [NOT] NULL and whose
-- expires_at (finished) or lease_ends_at (unfinished) is in [from_ts, before], oldest first, skipping rows a
-- claim holds. Returns the count and the latest timestamp deleted (from_ts when none).
CREATE OR REPLACE FUNCTION idem_keys_sweep_kind(
    finished boolean, before timestamptz, from_ts timestamptz, batch_size integer,
    OUT removed bigint, OUT last_ts timestamptz)
RETURNS record
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF finished THEN
        WITH gone AS (
            DELETE FROM idem_keys WHERE ctid = ANY (ARRAY(
                SELECT s.ctid FROM idem_keys AS s
                 WHERE s.finished_at IS NOT NULL AND s.expires_at <= before AND s.expires_at >= from_ts
                 ORDER BY s.expires_at LIMIT batch_size FOR UPDATE SKIP LOCKED))
              AND finished_at IS NOT NULL AND expires_at <= before
            RETURNING expires_at)
        SELECT count(*), coalesce(max(expires_at), from_ts) INTO removed, last_ts FROM gone;
    ELSE
        WITH gone AS (
            DELETE FROM idem_keys WHERE ctid = ANY (ARRAY(
                SELECT s.ctid FROM idem_keys AS s
                 WHERE s.finished_at IS NULL AND s.lease_ends_at <= before AND s.lease_ends_at >= from_ts
                 ORDER BY s.lease_ends_at LIMIT batch_size FOR UPDATE SKIP LOCKED))
              AND finished_at IS NULL AND lease_ends_at <= before
            RETURNING lease_ends_at)
        SELECT count(*), coalesce(max(lease_ends_at), from_ts) INTO removed, last_ts FROM gone;
    END IF;
END
$$;

-- Whether Citus distributes idem_keys here (citus/idem_keys_distribute.sql): its rows are then in shards,
-- and a sweep deletes from the shards this node holds. Without Citus, one catalog lookup.
CREATE OR REPLACE FUNCTION idem_keys_distributed()
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    found boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        -- (EXECUTE: the catalog is Citus's, absent where Citus is not installed)
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
           INTO found USING 'idem_keys'::regclass;
    END IF;
    RETURN found;
END
$$;

-- idem_keys_sweep_batch on a node of a Citus cluster, as the extension does it (src/api/sweep.rs): a batch
-- over each shard of idem_keys placed on this node, so every worker's sweep removes the expired rows it stores
-- and the coordinator, which holds no shard, removes none. Every batch starts at the oldest row (a cursor
-- names a place in one table; the shards are many). With take_ties (a sweep in one transaction) each shard's
-- rows go in one statement per kind; otherwise at most batch_size rows per shard and kind.
CREATE OR REPLACE FUNCTION idem_keys_sweep_shards(
    progress idem_sweep_progress, batch_size integer, take_ties boolean)
RETURNS idem_sweep_progress
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    started timestamptz := clock_timestamp();
    abandoned_before timestamptz := started - idem_keys_setting('idem_keys.abandon_after') * interval '1 second';
    max_rows integer := CASE WHEN take_ties THEN NULL ELSE batch_size END;
    shard text;
    fin bigint;
    aban bigint;
    removed bigint := 0;
    more boolean := false; -- a shard filled its batch: more may be waiting
    step idem_sweep_progress;
BEGIN
    -- The shard's name is Citus's: the table's, an underscore, the shard id. A placement still being copied
    -- here by a shard move is not listed until Citus records it.
    FOR shard IN EXECUTE
        $q$SELECT pg_catalog.format('%I.%I', n.nspname, t.relname || '_' || s.shardid)
             FROM pg_catalog.pg_dist_shard AS s
             JOIN pg_catalog.pg_dist_placement AS p ON p.shardid = s.shardid
             JOIN pg_catalog.pg_class AS t ON t.oid = s.logicalrelid
             JOIN pg_catalog.pg_namespace AS n ON n.oid = t.relnamespace
            WHERE s.logicalrelid = $1
              AND p.groupid = (SELECT g.groupid FROM pg_catalog.pg_dist_local_group AS g)
              AND pg_catalog.to_regclass(pg_catalog.format('%I.%I', n.nspname, t.relname || '_' || s.shardid)) IS NOT NULL
            ORDER BY s.shardid$q$ USING 'idem_keys'::regclass
    LOOP
        EXECUTE pg_catalog.format(
            $q$WITH gone AS (
                   DELETE FROM %1$s WHERE ctid = ANY (ARRAY(
                       SELECT s.ctid FROM %1$s AS s
                        WHERE s.finished_at IS NOT NULL AND s.expires_at <= $1
                        ORDER BY s.expires_at LIMIT $2 FOR UPDATE SKIP LOCKED))
                     AND finished_at IS NOT NULL AND expires_at <= $1
                   RETURNING 1)
               SELECT count(*) FROM gone$q$, shard) INTO fin USING started, max_rows;
        EXECUTE pg_catalog.format(
            $q$WITH gone AS (
                   DELETE FROM %1$s WHERE ctid = ANY (ARRAY(
                       SELECT s.ctid FROM %1$s AS s
                        WHERE s.finished_at IS NULL AND s.lease_ends_at <= $1
                        ORDER BY s.lease_ends_at LIMIT $2 FOR UPDATE SKIP LOCKED))
                     AND finished_at IS NULL AND lease_ends_at <= $1
                   RETURNING 1)
               SELECT count(*) FROM gone$q$, shard) INTO aban USING abandoned_before, max_rows;
        removed := removed + fin + aban;
        more := more OR (max_rows IS NOT NULL AND greatest(fin, aban) >= max_rows);
    END LOOP;
    step.removed := coalesce(progress.removed, 0) + removed;
    step.longest_batch_micros := greatest(coalesce(progress.longest_batch_micros, 0),
        (extract(epoch FROM clock_timestamp() - started) * 1000000)::bigint);
    step.done := NOT more;
    RETURN step;
END
$$;

-- One batch from progress (NULL: a new sweep): expired answers and abandoned claims; with take_ties (a
-- sweep in one transaction) a full batch also takes the rest of the timestamp it ended on.
CREATE OR REPLACE FUNCTION idem_keys_sweep_batch(
    progress idem_sweep_progress, batch_size integer, take_ties boolean)
RETURNS idem_sweep_progress
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    started timestamptz := clock_timestamp();
    abandoned_before timestamptz := started - idem_keys_setting('idem_keys.abandon_after') * interval '1 second';
    fin record;
    aban record;
    rest bigint;
    step idem_sweep_progress;
BEGIN
    IF idem_keys_distributed() THEN
        RETURN idem_keys_sweep_shards(progress, batch_size, take_ties);
    END IF;
    fin := idem_keys_sweep_kind(true, started, coalesce(progress.finished_from, '-infinity'), batch_size);
    IF take_ties AND fin.removed >= batch_size THEN
        SELECT g.removed INTO rest FROM idem_keys_sweep_kind(true, fin.last_ts, fin.last_ts, NULL) AS g;
        fin.removed := fin.removed + rest;
        fin.last_ts := fin.last_ts + interval '1 microsecond';
    END IF;
    aban := idem_keys_sweep_kind(false, abandoned_before, coalesce(progress.abandoned_from, '-infinity'), batch_size);
    IF take_ties AND aban.removed >= batch_size THEN
        SELECT g.removed INTO rest FROM idem_keys_sweep_kind(false, aban.last_ts, aban.last_ts, NULL) AS g;
        aban.removed := aban.removed + rest;
        aban.last_ts := aban.last_ts + interval '1 microsecond';
    END IF;
    step.finished_from := fin.last_ts;
    step.abandoned_from := aban.last_ts;
    step.removed := coalesce(progress.removed, 0) + fin.removed + aban.removed;
    step.longest_batch_micros := greatest(coalesce(progress.longest_batch_micros, 0),
        (extract(epoch FROM clock_timestamp() - started) * 1000000)::bigint);
    step.done := NOT (fin.removed >= batch_size OR aban.removed >= batch_size);
    RETURN step;
END
$$;

-- The sweep is over: record it for idem_sweep_status().
CREATE OR REPLACE FUNCTION idem_keys_record_sweep(removed bigint, longest_batch_micros bigint)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    INSERT INTO idem_keys_sweep_record AS r (last_sweep_at, last_sweep_removed, removed_since_start,
                                             sweeps_since_start, longest_batch)
    VALUES (clock_timestamp(), removed, removed, 1, longest_batch_micros * interval '1 microsecond')
    ON CONFLICT (only_row) DO UPDATE
       SET last_sweep_at = excluded.last_sweep_at, last_sweep_removed = excluded.last_sweep_removed,
           removed_since_start = r.removed_since_start + excluded.removed_since_start,
           sweeps_since_start = r.sweeps_since_start + 1,
           longest_batch = greatest(r.longest_batch, excluded.longest_batch);
END;

-- On a Citus coordinator the table is a shell: the rows are in the workers' shards, and a sweep there would
-- remove nothing and report 0, so a pg_cron job scheduled there would never sweep, silently. Refuse, and say
-- what to run instead (the extension's src/api/sweep.rs). Citus's catalog is read only where Citus is.
-- Quoted with $body$: the hint quotes a $$ string.
CREATE OR REPLACE FUNCTION idem_keys_sweeps_here(function_name text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $body$
DECLARE
    coordinator boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)
                        AND pg_catalog.citus_is_coordinator()'
           INTO coordinator USING 'idem_keys'::regclass;
    END IF;
    IF coordinator THEN
        PERFORM idem_keys_raise('0A000', function_name || ': this Citus coordinator holds no idem_keys rows to sweep',
            'idem_keys is distributed: its rows are in the workers'' shards, and each worker sweeps its own.',
            'Sweep on the workers: SELECT * FROM run_command_on_workers($$SELECT idem_sweep()$$) from here, or schedule the sweep on each worker (pg_cron there).');
    END IF;
END
$body$;

CREATE OR REPLACE FUNCTION idem_keys_batch_size(batch_size integer)
RETURNS integer
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF batch_size <= 0 THEN
        PERFORM idem_keys_raise('22023', 'batch_size must be positive, got ' || batch_size, NULL,
            'Pass NULL to use the default.');
    END IF;
    RETURN coalesce(batch_size, idem_keys_setting('idem_keys.sweep_batch_size'));
END
$$;

CREATE OR REPLACE FUNCTION idem_sweep(batch_size integer DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path FROM CURRENT
AS $$
DECLARE
    size integer;
    progress idem_sweep_progress;
BEGIN
    PERFORM idem_keys_writable('idem_sweep');
    PERFORM idem_keys_sweeps_here('idem_sweep');
    size := idem_keys_batch_size(batch_size);
    LOOP
        progress := idem_keys_sweep_batch(progress, size, true);
        EXIT WHEN progress.done;
    END LOOP;
    PERFORM idem_keys_record_sweep(progress.removed, progress.longest_batch_micros);
    RETURN progress.removed;
END
$$;

CREATE OR REPLACE FUNCTION idem_sweep_step(progress idem_sweep_progress, batch_size integer DEFAULT NULL)
RETURNS idem_sweep_progress
LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path FROM CURRENT
AS $$
DECLARE
    size integer;
    step idem_sweep_progress;
BEGIN
    PERFORM idem_keys_writable('idem_sweep_step');
    PERFORM idem_keys_sweeps_here('idem_sweep_step');
    size := idem_keys_batch_size(batch_size);
    -- idem_sweep_paced commits after every step, so no ties are taken.
    step := idem_keys_sweep_batch(progress, size, false);
    IF step.done THEN
        PERFORM idem_keys_record_sweep(step.removed, step.longest_batch_micros);
    END IF;
    RETURN step;
END
$$;

CREATE OR REPLACE FUNCTION idem_sweep_status()
RETURNS TABLE (last_sweep_at timestamptz, last_sweep_removed bigint, removed_since_start bigint,
               sweeps_since_start bigint, longest_batch interval, sweep_errors bigint,
               last_error_at timestamptz)
LANGUAGE sql STABLE STRICT SECURITY DEFINER PARALLEL SAFE
SET search_path FROM CURRENT
AS $$
    SELECT r.last_sweep_at, r.last_sweep_removed, r.removed_since_start, r.sweeps_since_start,
           r.longest_batch, 0::bigint, NULL::timestamptz
      FROM (SELECT) AS one LEFT JOIN idem_keys_sweep_record AS r ON true
$$;
