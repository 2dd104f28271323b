-- idem_keys 0.3.0 -> 0.4.0: the hot verbs (idem_claim, idem_finish, idem_lookup) lose their SET search_path
-- clause, whose GUC save and restore cost every call 4.6 % of a replay's time. The library now pins the same
-- path (pg_catalog, the extension's schema, pg_temp) around the SQL statements it runs, and finds its table
-- by OID in the extension's schema otherwise (src/home.rs). The other SECURITY DEFINER functions keep it.
-- Every change here must leave the catalog equal to a fresh 0.4.0 install (tests/upgrade checks it).
\echo Use "ALTER EXTENSION idem_keys UPDATE TO '0.4.0'" to load this file. \quit

ALTER FUNCTION @extschema@.idem_claim(text, text, jsonb, interval, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_claim(text, text, bytea, interval, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_finish(text, text, bigint, integer, jsonb, jsonb, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_finish(text, text, bigint, integer, bytea, jsonb, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_lookup(text, text) RESET search_path;
