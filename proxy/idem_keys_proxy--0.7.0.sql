-- idem_keys_proxy 0.7.0: the idem_keys 0.7.0 API on a PL/Proxy router. Every function has the name, parameter
-- names, defaults, overloads and result type of its idem_keys counterpart, so an application moves to the
-- sharded setup by changing its connection string (docs/scale-out.md).
--
-- The cluster is the SQL/MED server idem_keys_cluster (FOREIGN DATA WRAPPER plproxy, options p0, p1, … one per
-- partition, a power of two of them), with a user mapping for the role that owns this extension. The operator
-- creates both, before or after CREATE EXTENSION.
--
-- The router also needs the idem_keys package's library (no CREATE EXTENSION idem_keys there): the argument
-- checks and tenant binding run on the router, where the caller is known, with the node's own code and
-- settings (idem_keys.tenant_binding and friends, set on the router), and idem_fingerprint is the node's
-- function, computed locally. The partitions' idem_keys lives in a schema of the same name as this
-- extension's, and the remote calls name it, so the router role's search_path there reaches nothing.
--
-- Three layers:
--   idem_keys_proxy.route(scope, key)     where a key lives: hashtext over both, so one large scope spreads
--   idem_keys_proxy.remote_*              PL/Proxy functions: one remote call each (or one per partition)
--   @extschema@.idem_*                    the API: PL/pgSQL wrappers, SECURITY DEFINER (so the owner's user
--                                         mapping is the only one), that give errors back as one node would
--                                         (idem_keys_proxy.reraise) and aggregate the fan-out verbs.

\echo Use "CREATE EXTENSION idem_keys_proxy" to load this file. \quit

CREATE SCHEMA idem_keys_proxy;
COMMENT ON SCHEMA idem_keys_proxy IS
    'idem_keys_proxy internals: routing, the PL/Proxy remote calls, error translation. Not an API.';
REVOKE ALL ON SCHEMA idem_keys_proxy FROM PUBLIC;

-- The result types, field for field as idem_keys 0.7.0 defines them.
CREATE TYPE @extschema@.idem_result AS (
    outcome        text,
    token          bigint,
    attempt        integer,
    status_code    integer,
    response       jsonb,
    response_bytes bytea,
    headers        jsonb,
    retry_after    integer,
    created_at     timestamptz,
    checkpoint       text,
    checkpoint_state jsonb
);
COMMENT ON TYPE @extschema@.idem_result IS
    'What idem_claim and idem_lookup return, as on one idem_keys node (the partition answered it).';

-- --- Routing ------------------------------------------------------------------------------------------------

-- Where a key lives: a hash of scope and key together, so that one large scope (a big merchant) spreads over
-- every partition instead of making one hot. The length prefix keeps ('ab', 'c') and ('a', 'bc') apart.
-- PL/Proxy keeps the low bits (hash & (partitions - 1)). Changing this function moves every key. Not STRICT:
-- a NULL scope or key goes to partition 0, whose idem_* raises the 22004 one node gives (PL/Proxy would
-- refuse a NULL hash with an error of its own).
CREATE FUNCTION idem_keys_proxy.route(scope text, key text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN coalesce(pg_catalog.hashtext(pg_catalog.length(scope)::text || ':' || scope || key), 0);
COMMENT ON FUNCTION idem_keys_proxy.route(text, text) IS
    'The hash a key is routed by: hashtext(length(scope) || '':'' || scope || key), 0 if either is NULL; PL/Proxy keeps its low bits.';

-- The partition count, from the server's options (p0, p1, …).
CREATE FUNCTION idem_keys_proxy.partitions() RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n integer;
BEGIN
    SELECT count(*) INTO n
      FROM pg_foreign_server AS s, unnest(s.srvoptions) AS o(opt)
     WHERE s.srvname = 'idem_keys_cluster' AND o.opt ~ '^p[0-9]+=';
    IF NOT FOUND OR n = 0 THEN
        RAISE EXCEPTION 'idem_keys_proxy: no partitions: server idem_keys_cluster does not exist or lists none'
            USING ERRCODE = '42704',
            HINT = 'CREATE SERVER idem_keys_cluster FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''host=… dbname=…'', p1 …) and a user mapping for the extension''s owner (docs/scale-out.md).';
    END IF;
    RETURN n;
END
$$;
COMMENT ON FUNCTION idem_keys_proxy.partitions() IS
    'How many partitions server idem_keys_cluster lists (its p0, p1, … options); 42704 if none.';

-- --- Errors: what one node would have said ------------------------------------------------------------------

-- PL/Proxy keeps a remote error's SQLSTATE but rewrites its texts: the message gets a prefix naming the proxy
-- function and the partition ("idem_keys_proxy.remote_finish_jsonb(7): [shop] REMOTE ERROR: "), the detail
-- and hint get "Remote detail: " and "Remote hint: ". This takes them off again, so an application sees the
-- error one idem_keys node gives. An error of PL/Proxy itself (XX000) that is not a remote one is a partition
-- the router cannot reach: it becomes 08006, which clients retry. PL/Proxy's text names the partition's host,
-- port and role, which are the operator's business, not the caller's: it goes to the router's log only.
CREATE FUNCTION idem_keys_proxy.reraise(state text, message text, detail text, hint text) RETURNS void
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
COMMENT ON FUNCTION idem_keys_proxy.reraise(text, text, text, text) IS
    'Raises an error that came through PL/Proxy as one idem_keys node would: same SQLSTATE, prefixes removed; an unreachable partition becomes 08006, its details logged on the router only.';

-- --- The remote calls ---------------------------------------------------------------------------------------
-- The node's argument checks and tenant binding, run here before a call is routed (the idem_keys library's
-- code; 22004, 22023 and 42501 exactly as one node raises them).
CREATE FUNCTION idem_keys_proxy.check_call(function text, scope text, key text) RETURNS void
LANGUAGE c STABLE PARALLEL SAFE
AS '$libdir/idem_keys', 'idem_keys_proxy_check_call_wrapper';
COMMENT ON FUNCTION idem_keys_proxy.check_call(text, text, text) IS
    'Raises what one idem_keys node raises for this scope and key before it reads anything: NULLs, lengths, and a scope outside the caller''s tenant (idem_keys.tenant_binding on this router).';

-- One PL/Proxy function per remote statement, called only by the wrappers below (VOLATILE: PL/Proxy insists). TARGET names the partition's
-- function in the schema named as this extension's, so the router role's search_path there plays no part.

CREATE FUNCTION idem_keys_proxy.remote_claim_jsonb(scope text, key text, request jsonb, lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
$$;
CREATE FUNCTION idem_keys_proxy.remote_claim_bytea(scope text, key text, request bytea, lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
$$;
CREATE FUNCTION idem_keys_proxy.remote_claim_body(scope text, key text, request bytea, is_json boolean,
    lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
$$;
CREATE FUNCTION idem_keys_proxy.remote_claim_http(scope text, key text, method text, target text, request bytea,
    is_json boolean, lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
$$;
CREATE FUNCTION idem_keys_proxy.remote_finish_jsonb(scope text, key text, token bigint, status_code integer,
    response jsonb, headers jsonb, retention interval)
RETURNS void LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_finish;
$$;
CREATE FUNCTION idem_keys_proxy.remote_finish_bytea(scope text, key text, token bigint, status_code integer,
    response bytea, headers jsonb, retention interval)
RETURNS void LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_finish;
$$;
CREATE FUNCTION idem_keys_proxy.remote_release(scope text, key text, token bigint)
RETURNS boolean LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_release;
$$;
CREATE FUNCTION idem_keys_proxy.remote_checkpoint(scope text, key text, token bigint, point text, state jsonb)
RETURNS void LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_checkpoint;
$$;
CREATE FUNCTION idem_keys_proxy.remote_lookup(scope text, key text)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_lookup;
$$;

-- The fan-out: RUN ON ALL works only for set-returning functions and returns the partitions' rows unmerged;
-- the wrappers merge them. The per-partition ones take the partition number as their hash (RUN ON part: part
-- & (n - 1) = part for every part < n).
CREATE FUNCTION idem_keys_proxy.remote_sweep_all(batch_size integer)
RETURNS SETOF bigint LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON ALL;
    TARGET @extschema@.idem_sweep;
$$;
CREATE FUNCTION idem_keys_proxy.remote_stale_all(older_than interval, max_rows integer)
RETURNS TABLE (scope text, key text, token bigint, attempt integer, claimed_at timestamptz,
               lease_ends_at timestamptz)
LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON ALL;
    TARGET @extschema@.idem_stale;
$$;
CREATE FUNCTION idem_keys_proxy.remote_stats_all(
    OUT in_progress bigint, OUT stale bigint, OUT finished bigint, OUT expired bigint,
    OUT oldest_in_progress_age interval, OUT table_bytes bigint,
    OUT last_sweep_at timestamptz, OUT last_sweep_removed bigint, OUT removed_since_start bigint,
    OUT sweep_errors bigint)
RETURNS SETOF record LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON ALL;
    TARGET @extschema@.idem_stats;
$$;
CREATE FUNCTION idem_keys_proxy.remote_sweep_status_on(part integer)
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
CREATE FUNCTION idem_keys_proxy.remote_partition_on(part integer, OUT version text, OUT keys bigint)
RETURNS SETOF record LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON part;
    SELECT (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'idem_keys') AS version,
           (SELECT s.in_progress + s.stale + s.finished + s.expired FROM @extschema@.idem_stats() AS s) AS keys;
$$;

-- --- The API ------------------------------------------------------------------------------------------------
-- SECURITY DEFINER: PL/Proxy connects with the user mapping of the current user, so inside these functions
-- that is always the extension's owner, and callers need neither a mapping nor USAGE on the server.
-- client_min_messages = warning: after a remote error PL/Proxy drops that connection on the next call with a
-- NOTICE ("PL/Proxy: dropping stale conn") that one node never sends; idem_keys itself sends no notices.

CREATE FUNCTION @extschema@.idem_claim(scope text, key text, request jsonb, lease interval DEFAULT NULL,
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
CREATE FUNCTION @extschema@.idem_claim(scope text, key text, request bytea, lease interval DEFAULT NULL,
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
CREATE FUNCTION @extschema@.idem_claim(scope text, key text, request bytea, is_json boolean,
    lease interval DEFAULT NULL, wait interval DEFAULT '0')
RETURNS @extschema@.idem_result LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_claim', scope, key);
    RETURN idem_keys_proxy.remote_claim_body(scope, key, request, is_json, lease, wait);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;
CREATE FUNCTION @extschema@.idem_claim(scope text, key text, method text, target text, request bytea,
    is_json boolean, lease interval DEFAULT NULL, wait interval DEFAULT '0')
RETURNS @extschema@.idem_result LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    PERFORM idem_keys_proxy.check_call('idem_claim', scope, key);
    RETURN idem_keys_proxy.remote_claim_http(scope, key, method, target, request, is_json, lease, wait);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;
CREATE FUNCTION @extschema@.idem_finish(scope text, key text, token bigint, status_code integer, response jsonb,
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
CREATE FUNCTION @extschema@.idem_finish(scope text, key text, token bigint, status_code integer, response bytea,
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
CREATE FUNCTION @extschema@.idem_release(scope text, key text, token bigint)
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
CREATE FUNCTION @extschema@.idem_checkpoint(scope text, key text, token bigint, point text, state jsonb DEFAULT NULL)
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
CREATE FUNCTION @extschema@.idem_lookup(scope text, key text)
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
-- The node's own functions, computed here: the same bytes as on any partition, and no partition needed.
CREATE FUNCTION @extschema@.idem_fingerprint(request jsonb) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS '$libdir/idem_keys', 'idem_fingerprint_jsonb_wrapper';
CREATE FUNCTION @extschema@.idem_fingerprint(request bytea) RETURNS bytea
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS '$libdir/idem_keys', 'idem_fingerprint_bytea_wrapper';

-- The admin verbs, answering like one node over all partitions. Revoked from PUBLIC, as on a node.
CREATE FUNCTION @extschema@.idem_sweep(batch_size integer DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    RETURN (SELECT coalesce(sum(r.n), 0)::bigint FROM idem_keys_proxy.remote_sweep_all(batch_size) AS r(n));
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;
CREATE FUNCTION @extschema@.idem_stale(older_than interval DEFAULT NULL, max_rows integer DEFAULT 100)
RETURNS TABLE (scope text, key text, token bigint, attempt integer, claimed_at timestamptz,
               lease_ends_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    -- Each partition returns its max_rows oldest, so the max_rows oldest overall are among them.
    RETURN QUERY
        SELECT r.scope, r.key, r.token, r.attempt, r.claimed_at, r.lease_ends_at
          FROM idem_keys_proxy.remote_stale_all(older_than, max_rows) AS r
         ORDER BY r.lease_ends_at, r.scope, r.key
         -- No LIMIT 0 or NULL, which would skip the call: the partitions refuse such a max_rows themselves.
         LIMIT (CASE WHEN max_rows > 0 THEN max_rows END);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;
CREATE FUNCTION @extschema@.idem_stats(
    OUT in_progress bigint, OUT stale bigint, OUT finished bigint, OUT expired bigint,
    OUT oldest_in_progress_age interval, OUT table_bytes bigint,
    OUT last_sweep_at timestamptz, OUT last_sweep_removed bigint, OUT removed_since_start bigint,
    OUT sweep_errors bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    -- Counts and sizes add up; the oldest age and the last sweep are the maximum over partitions, and
    -- last_sweep_removed is what the partitions' last sweeps removed together.
    SELECT sum(r.in_progress), sum(r.stale), sum(r.finished), sum(r.expired), max(r.oldest_in_progress_age),
           sum(r.table_bytes), max(r.last_sweep_at), sum(r.last_sweep_removed), sum(r.removed_since_start),
           sum(r.sweep_errors)
      INTO in_progress, stale, finished, expired, oldest_in_progress_age, table_bytes, last_sweep_at,
           last_sweep_removed, removed_since_start, sweep_errors
      FROM idem_keys_proxy.remote_stats_all() AS r;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;
CREATE FUNCTION @extschema@.idem_sweep_status()
RETURNS TABLE (partition integer, last_sweep_at timestamptz, last_sweep_removed bigint,
               removed_since_start bigint, sweeps_since_start bigint, longest_batch interval,
               sweep_errors bigint, last_error_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE s text; m text; d text; h text;
BEGIN
    FOR p IN 0 .. idem_keys_proxy.partitions() - 1 LOOP
        partition := p;
        SELECT r.last_sweep_at, r.last_sweep_removed, r.removed_since_start, r.sweeps_since_start,
               r.longest_batch, r.sweep_errors, r.last_error_at
          INTO last_sweep_at, last_sweep_removed, removed_since_start, sweeps_since_start, longest_batch,
               sweep_errors, last_error_at
          FROM idem_keys_proxy.remote_sweep_status_on(p) AS r;
        RETURN NEXT;
    END LOOP;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    PERFORM idem_keys_proxy.reraise(s, m, d, h);
END
$$;

-- The operator's check: every partition, reachable or not, its idem_keys version and key count. A partition
-- on another version than this router's is an error (55000), with every partition's version in the detail:
-- the router's functions call the API of exactly that version.
CREATE FUNCTION @extschema@.idem_cluster_status()
RETURNS TABLE (partition integer, reachable boolean, version text, keys bigint, error text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET client_min_messages = warning
AS $$
DECLARE
    mine text := (SELECT e.extversion FROM pg_extension AS e WHERE e.extname = 'idem_keys_proxy');
    wrong text[] := '{}';
    seen text[] := '{}';
BEGIN
    FOR p IN 0 .. idem_keys_proxy.partitions() - 1 LOOP
        partition := p;
        BEGIN
            SELECT r.version, r.keys INTO version, keys FROM idem_keys_proxy.remote_partition_on(p) AS r;
            reachable := true;
            error := NULL;
        EXCEPTION WHEN OTHERS THEN
            reachable := false;
            version := NULL;
            keys := NULL;
            error := SQLERRM;
        END;
        seen := seen || format('partition %s: %s', p, coalesce(version, 'unreachable'));
        IF reachable AND version IS DISTINCT FROM mine THEN
            wrong := wrong || format('partition %s runs idem_keys %s', p, coalesce(version, '(not installed)'));
        END IF;
        RETURN NEXT;
    END LOOP;
    IF cardinality(wrong) > 0 THEN
        RAISE EXCEPTION 'idem_keys_proxy: % of the partitions run another idem_keys version than this router (%)',
            cardinality(wrong), mine USING ERRCODE = '55000',
            DETAIL = array_to_string(seen, '; ') || '.',
            HINT = format('ALTER EXTENSION idem_keys UPDATE TO %L on those partitions, or ALTER EXTENSION idem_keys_proxy UPDATE here, so that all agree.', mine);
    END IF;
END
$$;

-- --- Volatility, comments, privileges -----------------------------------------------------------------------

COMMENT ON FUNCTION @extschema@.idem_claim(text, text, jsonb, interval, interval) IS
    'idem_claim on the partition that holds (scope, key): as on one node. Two-step mode only: the remote call commits on its own.';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, interval, interval) IS
    'idem_claim for a raw request body, on the partition that holds (scope, key).';
COMMENT ON FUNCTION @extschema@.idem_finish(text, text, bigint, integer, jsonb, jsonb, interval) IS
    'idem_finish on the partition that holds (scope, key): store the JSON answer of a claimed key.';
COMMENT ON FUNCTION @extschema@.idem_finish(text, text, bigint, integer, bytea, jsonb, interval) IS
    'idem_finish on the partition that holds (scope, key): store the raw answer of a claimed key.';
COMMENT ON FUNCTION @extschema@.idem_release(text, text, bigint) IS
    'idem_release on the partition that holds (scope, key).';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, boolean, interval, interval) IS
    'idem_claim for a request body of any kind (JSON when is_json and it parses), on the partition that holds (scope, key).';
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, text, text, bytea, boolean, interval, interval) IS
    'idem_claim for an HTTP request (method, target, body; JSON when is_json and it parses), on the partition that holds (scope, key).';
COMMENT ON FUNCTION @extschema@.idem_checkpoint(text, text, bigint, text, jsonb) IS
    'idem_checkpoint on the partition that holds (scope, key).';
COMMENT ON FUNCTION @extschema@.idem_lookup(text, text) IS
    'idem_lookup on the partition that holds (scope, key).';
COMMENT ON FUNCTION @extschema@.idem_fingerprint(jsonb) IS
    'idem_fingerprint, computed on the router by the idem_keys library: the partitions'' bytes, with no partition needed.';
COMMENT ON FUNCTION @extschema@.idem_fingerprint(bytea) IS
    'idem_fingerprint of a raw body, computed on the router by the idem_keys library.';
COMMENT ON FUNCTION @extschema@.idem_sweep(integer) IS
    'idem_sweep on every partition at once; returns the total removed. Each partition''s worker is the recommended way. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_stale(interval, integer) IS
    'The max_rows oldest stale claims over all partitions, ordered by lease end. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_stats() IS
    'idem_stats over all partitions: counts and sizes summed, oldest age and last sweep the maximum. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_sweep_status() IS
    'idem_sweep_status of every partition, one row each with its partition number. Revoked from PUBLIC.';
COMMENT ON FUNCTION @extschema@.idem_cluster_status() IS
    'Per partition: reachable, idem_keys version, key count; 55000 if a reachable partition runs another version than this router. Revoked from PUBLIC.';
COMMENT ON FUNCTION idem_keys_proxy.remote_claim_jsonb(text, text, jsonb, interval, interval) IS 'PL/Proxy: idem_claim(jsonb) on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_claim_bytea(text, text, bytea, interval, interval) IS 'PL/Proxy: idem_claim(bytea) on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_claim_body(text, text, bytea, boolean, interval, interval) IS 'PL/Proxy: idem_claim(bytea, boolean) on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_claim_http(text, text, text, text, bytea, boolean, interval, interval) IS 'PL/Proxy: idem_claim(text, text, bytea, boolean) on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_finish_jsonb(text, text, bigint, integer, jsonb, jsonb, interval) IS 'PL/Proxy: idem_finish(jsonb) on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_finish_bytea(text, text, bigint, integer, bytea, jsonb, interval) IS 'PL/Proxy: idem_finish(bytea) on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_release(text, text, bigint) IS 'PL/Proxy: idem_release on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_checkpoint(text, text, bigint, text, jsonb) IS 'PL/Proxy: idem_checkpoint on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_lookup(text, text) IS 'PL/Proxy: idem_lookup on the key''s partition.';
COMMENT ON FUNCTION idem_keys_proxy.remote_sweep_all(integer) IS 'PL/Proxy: idem_sweep on every partition, one row each.';
COMMENT ON FUNCTION idem_keys_proxy.remote_stale_all(interval, integer) IS 'PL/Proxy: idem_stale on every partition, unmerged.';
COMMENT ON FUNCTION idem_keys_proxy.remote_stats_all() IS 'PL/Proxy: idem_stats on every partition, one row each.';
COMMENT ON FUNCTION idem_keys_proxy.remote_sweep_status_on(integer) IS 'PL/Proxy: idem_sweep_status on partition part.';
COMMENT ON FUNCTION idem_keys_proxy.remote_partition_on(integer) IS 'PL/Proxy: idem_keys version and key count of partition part.';

-- The application verbs stay callable by every role (they run as the owner); the rest is the owner's, or
-- granted on purpose (GRANT EXECUTE ON FUNCTION idem_stats() TO monitoring).
REVOKE ALL ON FUNCTION @extschema@.idem_sweep(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_stale(interval, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_sweep_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.idem_cluster_status() FROM PUBLIC;
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'idem_keys_proxy'::regnamespace LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
