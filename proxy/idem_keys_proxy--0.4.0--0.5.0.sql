-- idem_keys_proxy 0.4.0 -> 0.5.0: the argument checks and tenant binding run on the router (check_call, from
-- the idem_keys library, which the router now needs), idem_fingerprint is computed there instead of on a
-- partition, the remote calls name the partitions' functions by schema, and an unreachable partition's
-- connection details go to the router's log instead of the caller's DETAIL.

\echo Use "ALTER EXTENSION idem_keys_proxy UPDATE" to load this file. \quit

DROP FUNCTION idem_keys_proxy.remote_fingerprint_jsonb(jsonb);
DROP FUNCTION idem_keys_proxy.remote_fingerprint_bytea(bytea);

CREATE OR REPLACE FUNCTION idem_keys_proxy.reraise(state text, message text, detail text, hint text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- REMOTE FATAL: the partition ended the router's session (57P01 when an operator terminates it).
    remote boolean := message ~ '^\S+\(\d+\): \[[^]]*\] REMOTE (ERROR|FATAL): ';
BEGIN
    IF remote THEN
        message := regexp_replace(message, '^\S+\(\d+\): \[[^]]*\] REMOTE (ERROR|FATAL): ', '');
        detail := regexp_replace(detail, '^Remote detail: ', '');
        hint := regexp_replace(hint, '^Remote hint: ', '');
    ELSIF state = 'XX000' AND message ~ '(could not connect|connection to server|PQconnectPoll|server closed the connection|connection lost|Connection refused|timeout)' THEN
        RAISE LOG 'idem_keys_proxy: a partition is unreachable: %', message;
        RAISE EXCEPTION 'idem_keys_proxy: a partition is unreachable' USING ERRCODE = '08006',
            DETAIL = 'The partition that holds the key did not answer the router; the router''s log says which and why.',
            HINT = 'Retry with the same key: only keys on that partition wait for it; the others are served.';
    END IF;
    -- RAISE refuses a NULL option, and an empty one would print an empty DETAIL or HINT line.
    IF detail <> '' AND hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail, HINT = hint;
    ELSIF detail <> '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, DETAIL = detail;
    ELSIF hint <> '' THEN
        RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = state, MESSAGE = message;
END
$$;

CREATE FUNCTION idem_keys_proxy.check_call(function text, scope text, key text) RETURNS void
LANGUAGE c STABLE PARALLEL SAFE
AS '$libdir/idem_keys', 'idem_keys_proxy_check_call_wrapper';

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_claim_jsonb(scope text, key text, request jsonb, lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_claim_bytea(scope text, key text, request bytea, lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_finish_jsonb(scope text, key text, token bigint, status_code integer,
    response jsonb, headers jsonb, retention interval)
RETURNS void LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_finish;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_finish_bytea(scope text, key text, token bigint, status_code integer,
    response bytea, headers jsonb, retention interval)
RETURNS void LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_finish;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_release(scope text, key text, token bigint)
RETURNS boolean LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_release;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_checkpoint(scope text, key text, token bigint, point text, state jsonb)
RETURNS void LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_checkpoint;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_lookup(scope text, key text)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_lookup;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_sweep_all(batch_size integer)
RETURNS SETOF bigint LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON ALL;
    TARGET @extschema@.idem_sweep;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_stale_all(older_than interval, max_rows integer)
RETURNS TABLE (scope text, key text, token bigint, attempt integer, claimed_at timestamptz,
               lease_ends_at timestamptz)
LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON ALL;
    TARGET @extschema@.idem_stale;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_stats_all(
    OUT in_progress bigint, OUT stale bigint, OUT finished bigint, OUT expired bigint,
    OUT oldest_in_progress_age interval, OUT table_bytes bigint,
    OUT last_sweep_at timestamptz, OUT last_sweep_removed bigint, OUT removed_since_start bigint,
    OUT sweep_errors bigint)
RETURNS SETOF record LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON ALL;
    TARGET @extschema@.idem_stats;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_sweep_status_on(part integer)
RETURNS TABLE (last_sweep_at timestamptz, last_sweep_removed bigint, removed_since_start bigint,
               sweeps_since_start bigint, longest_batch interval, sweep_errors bigint,
               last_error_at timestamptz)
LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON part;
    SELECT s.last_sweep_at, s.last_sweep_removed, s.removed_since_start, s.sweeps_since_start,
           s.longest_batch, s.sweep_errors, s.last_error_at
      FROM @extschema@.idem_sweep_status() AS s;
$$;

CREATE OR REPLACE FUNCTION idem_keys_proxy.remote_partition_on(part integer, OUT version text, OUT keys bigint)
RETURNS SETOF record LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON part;
    SELECT (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'idem_keys') AS version,
           (SELECT s.in_progress + s.stale + s.finished + s.expired FROM @extschema@.idem_stats() AS s) AS keys;
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_claim(scope text, key text, request jsonb, lease interval DEFAULT NULL,
    wait interval DEFAULT '0')
RETURNS @extschema@.idem_result LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_claim', scope, key);
    RETURN idem_keys_proxy.remote_claim_jsonb(scope, key, request, lease, wait);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_claim(scope text, key text, request bytea, lease interval DEFAULT NULL,
    wait interval DEFAULT '0')
RETURNS @extschema@.idem_result LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_claim', scope, key);
    RETURN idem_keys_proxy.remote_claim_bytea(scope, key, request, lease, wait);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_finish(scope text, key text, token bigint, status_code integer, response jsonb,
    headers jsonb DEFAULT NULL, retention interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_finish', scope, key);
    PERFORM idem_keys_proxy.remote_finish_jsonb(scope, key, token, status_code, response, headers, retention);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_finish(scope text, key text, token bigint, status_code integer, response bytea,
    headers jsonb DEFAULT NULL, retention interval DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_finish', scope, key);
    PERFORM idem_keys_proxy.remote_finish_bytea(scope, key, token, status_code, response, headers, retention);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_release(scope text, key text, token bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_release', scope, key);
    RETURN idem_keys_proxy.remote_release(scope, key, token);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_checkpoint(scope text, key text, token bigint, point text, state jsonb DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_checkpoint', scope, key);
    PERFORM idem_keys_proxy.remote_checkpoint(scope, key, token, point, state);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_lookup(scope text, key text)
RETURNS @extschema@.idem_result LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text; r @extschema@.idem_result;
BEGIN
    -- PL/Proxy turns the partition's NULL (an unknown key) into a row of NULLs; one node answers NULL.
    PERFORM idem_keys_proxy.check_call('idem_lookup', scope, key);
    r := idem_keys_proxy.remote_lookup(scope, key);
    IF r.outcome IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN r;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

CREATE OR REPLACE FUNCTION @extschema@.idem_fingerprint(request jsonb) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS '$libdir/idem_keys', 'idem_fingerprint_jsonb_wrapper';

CREATE OR REPLACE FUNCTION @extschema@.idem_fingerprint(request bytea) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS '$libdir/idem_keys', 'idem_fingerprint_bytea_wrapper';

COMMENT ON FUNCTION idem_keys_proxy.reraise(text, text, text, text) IS
    'Raises an error that came through PL/Proxy as one idem_keys node would: same SQLSTATE, prefixes removed; an unreachable partition becomes 08006, its details logged on the router only.';

COMMENT ON FUNCTION idem_keys_proxy.check_call(text, text, text) IS
    'Raises what one idem_keys node raises for this scope and key before it reads anything: NULLs, lengths, and a scope outside the caller''s tenant (idem_keys.tenant_binding on this router).';

COMMENT ON FUNCTION @extschema@.idem_fingerprint(jsonb) IS
    'idem_fingerprint, computed on the router by the idem_keys library: the partitions'' bytes, with no partition needed.';

COMMENT ON FUNCTION @extschema@.idem_fingerprint(bytea) IS
    'idem_fingerprint of a raw body, computed on the router by the idem_keys library.';

REVOKE ALL ON FUNCTION idem_keys_proxy.check_call(text, text, text) FROM PUBLIC;
