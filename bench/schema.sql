-- The two baselines idem_keys is measured against, and the helpers that fill every contender's table.
-- Both baselines copy the extension's table (columns, CHECK constraints and indexes) so each contender
-- writes the same rows into the same shape; only the code path differs.
CREATE EXTENSION idem_keys;

-- 1. Hand-written SQL: the table and a token sequence; the protocol itself lives in scripts/sql/*.pgbench.
CREATE SCHEMA bench_sql;
CREATE TABLE bench_sql.keys (LIKE public.idem_keys INCLUDING ALL);
CREATE SEQUENCE bench_sql.keys_token_seq AS bigint;

-- 2. PL/pgSQL: what a user might write instead of installing the extension, with the same semantics
-- (fingerprint, lease, fencing token, replay, mismatch, in_progress, recovery of a dead owner's key).
-- Written the plain way a user would: no SECURITY DEFINER, no pinned search_path (idem_keys pays for both).
CREATE SCHEMA bench_plpgsql;
CREATE TABLE bench_plpgsql.keys (LIKE public.idem_keys INCLUDING ALL);
CREATE SEQUENCE bench_plpgsql.keys_token_seq AS bigint;
CREATE TYPE bench_plpgsql.result AS (
    outcome text, token bigint, attempt int, status_code int, response jsonb, response_bytes bytea,
    headers jsonb, retry_after int, created_at timestamptz, checkpoint text, checkpoint_state jsonb);

CREATE FUNCTION bench_plpgsql.claim(p_scope text, p_key text, p_request jsonb,
                                    p_lease interval DEFAULT '5 minutes')
RETURNS bench_plpgsql.result LANGUAGE plpgsql AS $$
DECLARE
    fp  bytea := sha256(convert_to(p_request::text, 'UTF8'));
    now_ timestamptz;
    k   bench_plpgsql.keys;
    r   bench_plpgsql.result;
BEGIN
    IF p_scope IS NULL OR p_key IS NULL OR p_request IS NULL THEN
        RAISE EXCEPTION 'claim: scope, key and request must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    LOOP
        now_ := clock_timestamp();
        INSERT INTO bench_plpgsql.keys AS t (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
        VALUES (p_scope, p_key, fp, nextval('bench_plpgsql.keys_token_seq'), 1, now_, now_, now_ + p_lease)
        ON CONFLICT (scope, key) DO NOTHING
        RETURNING t.token INTO r.token;
        IF FOUND THEN
            r.outcome := 'claimed'; r.attempt := 1; r.created_at := now_;
            RETURN r;
        END IF;
        -- A new statement, so a fresh snapshot: sees the row the insert conflicted with.
        SELECT * INTO k FROM bench_plpgsql.keys t WHERE t.scope = p_scope AND t.key = p_key;
        CONTINUE WHEN NOT FOUND;  -- released or swept since: insert again
        r.attempt := k.attempt; r.created_at := k.created_at;
        IF k.finished_at IS NOT NULL AND k.expires_at > now_ THEN
            IF k.fingerprint <> fp THEN r.outcome := 'mismatch'; RETURN r; END IF;
            r.outcome := 'replay'; r.status_code := k.status_code; r.response := k.response;
            r.response_bytes := k.response_bytes; r.headers := k.headers;
            RETURN r;
        ELSIF k.finished_at IS NULL THEN
            IF k.fingerprint <> fp THEN r.outcome := 'mismatch'; RETURN r; END IF;
            IF k.lease_ends_at > now_ THEN
                r.outcome := 'in_progress';
                r.retry_after := greatest(1, ceil(extract(epoch FROM k.lease_ends_at - now_)))::int;
                r.checkpoint := k.checkpoint; r.checkpoint_state := k.checkpoint_state;
                RETURN r;
            END IF;
        END IF;
        -- Expired answer or dead owner: take over. UPDATE re-checks WHERE on the newest row version,
        -- so of two recoverers exactly one gets a row back; the loser loops and reads the winner's row.
        UPDATE bench_plpgsql.keys t SET
            token = nextval('bench_plpgsql.keys_token_seq'),
            attempt = CASE WHEN t.finished_at IS NULL THEN t.attempt + 1 ELSE 1 END,
            created_at = CASE WHEN t.finished_at IS NULL THEN t.created_at ELSE now_ END,
            fingerprint = fp, claimed_at = now_, lease_ends_at = now_ + p_lease, finished_at = NULL,
            expires_at = NULL, status_code = NULL, response = NULL, response_bytes = NULL, headers = NULL,
            checkpoint = CASE WHEN t.finished_at IS NULL THEN t.checkpoint END,
            checkpoint_state = CASE WHEN t.finished_at IS NULL THEN t.checkpoint_state END
        WHERE t.scope = p_scope AND t.key = p_key
          AND ((t.finished_at IS NOT NULL AND t.expires_at <= now_)
            OR (t.finished_at IS NULL AND t.lease_ends_at <= now_ AND t.fingerprint = fp))
        RETURNING * INTO k;
        IF FOUND THEN
            r.outcome := CASE WHEN k.attempt > 1 THEN 'recovered' ELSE 'claimed' END;
            r.token := k.token; r.attempt := k.attempt; r.created_at := k.created_at;
            IF k.attempt > 1 THEN r.checkpoint := k.checkpoint; r.checkpoint_state := k.checkpoint_state; END IF;
            RETURN r;
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION bench_plpgsql.finish(p_scope text, p_key text, p_token bigint, p_status int, p_response jsonb,
                                     p_headers jsonb DEFAULT NULL, p_retention interval DEFAULT '24 hours')
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz := clock_timestamp();
    k    bench_plpgsql.keys;
BEGIN
    IF p_scope IS NULL OR p_key IS NULL OR p_token IS NULL OR p_status IS NULL THEN
        RAISE EXCEPTION 'finish: scope, key, token and status must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'finish: headers must be a JSON object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE bench_plpgsql.keys SET finished_at = now_, expires_at = now_ + p_retention, status_code = p_status,
                                  response = p_response, headers = p_headers
     WHERE scope = p_scope AND key = p_key AND token = p_token AND finished_at IS NULL;
    IF FOUND THEN RETURN; END IF;
    -- Why nothing matched: unknown, fenced out, or a retried finish (fine only if it says the same thing).
    SELECT * INTO k FROM bench_plpgsql.keys WHERE scope = p_scope AND key = p_key;
    IF NOT FOUND OR (k.finished_at IS NOT NULL AND k.expires_at <= now_) THEN
        RAISE EXCEPTION 'finish: unknown key' USING ERRCODE = 'no_data_found';
    ELSIF k.token <> p_token THEN
        RAISE EXCEPTION 'finish: token % does not own the key', p_token USING ERRCODE = 'object_not_in_prerequisite_state';
    ELSIF k.status_code IS DISTINCT FROM p_status OR k.response IS DISTINCT FROM p_response
          OR k.headers IS DISTINCT FROM p_headers THEN
        RAISE EXCEPTION 'finish: already finished with another answer' USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END $$;

-- 3. The portable edition (dist/idem_keys_portable.sql) is installed into the schema bench_portable by
-- bench/run.sh, from the same file `make portable` writes.

-- Harness helpers (not measured).
CREATE SCHEMA bench;

-- Each contender's fingerprint of a request: the extension's canonical SHA-256, or what the baselines compute.
CREATE FUNCTION bench.fingerprint(tbl regclass, request jsonb) RETURNS bytea LANGUAGE sql AS $$
    SELECT CASE WHEN tbl IN ('public.idem_keys'::regclass, to_regclass('bench_portable.idem_keys'))
                THEN idem_fingerprint(request)
                ELSE sha256(convert_to(request::text, 'UTF8')) END
$$;

-- Fills keys lo..hi of one scope in one contender's table, in one of the states the workloads need:
--   finished: answered, replayable for 30 days; busy: claimed, lease for a day, unfinished;
--   stale: claimed, lease ended a minute ago (its owner died); expired: answered, retention ended an hour ago.
-- Tokens are the key numbers (the sequence is moved past them afterwards), as if drawn in order. The keys
-- were written one after another over the hour before the last one: every timestamp of key i is moved back
-- by (hi - i) steps of 1 hour / (hi - lo + 1), so no two keys share an expiry, as in a live table.
CREATE PROCEDURE bench.populate(tbl regclass, kind text, scope text, lo bigint, hi bigint,
                                request jsonb, response jsonb, headers jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    done boolean := kind IN ('finished', 'expired');
    ends timestamptz := now() + CASE kind WHEN 'busy' THEN interval '1 day' ELSE interval '-1 minute' END;
    expires timestamptz := now() + CASE kind WHEN 'expired' THEN interval '-1 hour' ELSE interval '30 days' END;
    step interval := interval '1 hour' / (hi - lo + 1);
    seq regclass;
BEGIN
    IF kind NOT IN ('finished', 'busy', 'stale', 'expired') THEN
        RAISE EXCEPTION 'populate: unknown kind %', kind;
    END IF;
    EXECUTE format($q$
        INSERT INTO %s (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at,
                        finished_at, expires_at, status_code, response, headers)
        SELECT $1, i::text, $2, i, 1, now() - interval '1 hour' - back, now() - interval '1 hour' - back, $3 - back,
               CASE WHEN $4 THEN now() - interval '1 hour' - back END, CASE WHEN $4 THEN $5 - back END,
               CASE WHEN $4 THEN 201 END, CASE WHEN $4 THEN $6 END, CASE WHEN $4 THEN $7 END
          FROM generate_series($8, $9) i, LATERAL (SELECT ($9 - i) * $10 AS back) b$q$, tbl)
    USING scope, bench.fingerprint(tbl, request), ends, done, expires, response, headers, lo, hi, step;
    -- Fencing tokens must stay above every stored one, so a recovery always draws a larger token.
    seq := CASE tbl WHEN 'public.idem_keys'::regclass THEN 'public.idem_keys_token_seq'
                    WHEN 'bench_sql.keys'::regclass THEN 'bench_sql.keys_token_seq'
                    WHEN 'bench_portable.idem_keys'::regclass THEN 'bench_portable.idem_keys_token_seq'
                    ELSE 'bench_plpgsql.keys_token_seq' END;
    PERFORM setval(seq, greatest(hi, coalesce(pg_sequence_last_value(seq), 1)));
END $$;

-- Waits until the sweeper's record says `removed` keys have gone since the server started, from one
-- connection: polling with a new connection each time cost enough CPU on 2 cores to show in the claims' p99
-- during the worker's sweep (it did not in the other sweeps, which need no polling). Commits between
-- polls so it holds no snapshot; idem_sweep_status() reads shared memory.
CREATE PROCEDURE bench.await_sweep(removed bigint, timeout interval)
LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + timeout;
BEGIN
    WHILE (SELECT coalesce(s.removed_since_start, 0) FROM idem_sweep_status() s) < removed LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'the sweeper did not get to % removed keys within %', removed, timeout;
        END IF;
        COMMIT;
        PERFORM pg_sleep(0.5);
    END LOOP;
END $$;
