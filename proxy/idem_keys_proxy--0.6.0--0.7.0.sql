-- idem_keys_proxy 0.6.0 -> 0.7.0: the router routes idem_keys 0.7.0's new idem_claim forms (a request body of
-- any kind, with is_json; an HTTP request, with its method and target) to the key's partition. The version
-- follows idem_keys', whose partitions the router checks against its own (idem_cluster_status).

\echo Use "ALTER EXTENSION idem_keys_proxy UPDATE" to load this file. \quit

CREATE FUNCTION idem_keys_proxy.remote_claim_body(scope text, key text, request bytea, is_json boolean,
    lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
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
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, bytea, boolean, interval, interval) IS
    'idem_claim for a request body of any kind (JSON when is_json and it parses), on the partition that holds (scope, key).';
COMMENT ON FUNCTION idem_keys_proxy.remote_claim_body(text, text, bytea, boolean, interval, interval) IS 'PL/Proxy: idem_claim(bytea, boolean) on the key''s partition.';
CREATE FUNCTION idem_keys_proxy.remote_claim_http(scope text, key text, method text, target text, request bytea,
    is_json boolean, lease interval, wait interval)
RETURNS @extschema@.idem_result LANGUAGE plproxy VOLATILE AS $$
    CLUSTER 'idem_keys_cluster';
    RUN ON idem_keys_proxy.route(scope, key);
    TARGET @extschema@.idem_claim;
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
COMMENT ON FUNCTION @extschema@.idem_claim(text, text, text, text, bytea, boolean, interval, interval) IS
    'idem_claim for an HTTP request (method, target, body; JSON when is_json and it parses), on the partition that holds (scope, key).';
COMMENT ON FUNCTION idem_keys_proxy.remote_claim_http(text, text, text, text, bytea, boolean, interval, interval) IS 'PL/Proxy: idem_claim(text, text, bytea, boolean) on the key''s partition.';
-- As for every function in schema idem_keys_proxy: only the wrappers call them.
REVOKE ALL ON FUNCTION idem_keys_proxy.remote_claim_body(text, text, bytea, boolean, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION idem_keys_proxy.remote_claim_http(text, text, text, text, bytea, boolean, interval, interval) FROM PUBLIC;
