-- The portable edition's security model, as the extension's: installed by the database's owner (not a
-- superuser), the table and the sequence reachable only through the SECURITY DEFINER verbs, the maintenance
-- functions revoked from PUBLIC, and a caller's own objects reaching nothing inside the functions.
\set SHOW_CONTEXT never
SELECT r.rolsuper AS installed_by_a_superuser, r.rolcreaterole, r.rolcreatedb
  FROM pg_class AS c JOIN pg_roles AS r ON r.oid = c.relowner
 WHERE c.oid = 'idem_keys'::regclass;
-- Nothing of the edition is granted to PUBLIC but the verbs, the fingerprint and the setting readers.
SELECT p.oid::regprocedure AS for_everyone
  FROM pg_proc AS p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem%'
   AND has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY 1::text;
SELECT c.relname,
       CASE c.relkind WHEN 'S' THEN has_sequence_privilege('public', c.oid, 'USAGE, SELECT, UPDATE')
                      ELSE has_table_privilege('public', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE') END
         AS public_may_touch
  FROM pg_class AS c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'idem_keys%' AND c.relkind IN ('r', 'S')
 ORDER BY 1;
-- Every SECURITY DEFINER function has a pinned search_path: pg_catalog, the schema, pg_temp last.
SELECT DISTINCT p.proconfig AS pinned FROM pg_proc AS p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem%' AND p.prosecdef;
SELECT count(*) AS definer_functions_without_a_pinned_path FROM pg_proc AS p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem%' AND p.prosecdef AND p.proconfig IS NULL;
-- Every object of the edition says what it is (COMMENT ON), as the extension's do.
SELECT o.kind, o.name AS without_a_comment
  FROM (SELECT 'function' AS kind, p.oid::regprocedure::text AS name, obj_description(p.oid, 'pg_proc') AS comment
          FROM pg_proc AS p WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'idem%'
        UNION ALL
        SELECT 'relation', c.relname, obj_description(c.oid, 'pg_class')
          FROM pg_class AS c WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'idem%' AND c.relkind <> 'c'
        UNION ALL
        SELECT 'type', t.typname, obj_description(t.oid, 'pg_type')
          FROM pg_type AS t WHERE t.typnamespace = 'public'::regnamespace AND t.typname LIKE 'idem%' AND t.typtype = 'c'
            AND NOT EXISTS (SELECT FROM pg_class AS c WHERE c.reltype = t.oid AND c.relkind <> 'c')) AS o
 WHERE o.comment IS NULL
 ORDER BY 1, 2;

-- An application role with nothing but EXECUTE: the API works, the table and the sequence do not.
CREATE ROLE regress_portable_app LOGIN;
CREATE SCHEMA regress_decoy AUTHORIZATION regress_portable_app;
\c - regress_portable_app
\set SHOW_CONTEXT never
SELECT (idem_claim('sec', 'k', '{"a": 1}'::jsonb)).token AS t \gset
SELECT (idem_lookup('sec', 'k')).outcome;
SELECT idem_finish('sec', 'k', :t, 201, '{"id": 1}'::jsonb);
SELECT * FROM idem_keys;
\echo :LAST_ERROR_SQLSTATE
UPDATE idem_keys SET status_code = 500;
\echo :LAST_ERROR_SQLSTATE
SELECT nextval('idem_keys_token_seq');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_keys_settings;
\echo :LAST_ERROR_SQLSTATE
SELECT idem_sweep();
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_stats();
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.max_response_bytes', '1GB');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_publish('idem_keys.tenant_binding', 'off');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_portable_uninstall();
\echo :LAST_ERROR_SQLSTATE

-- A caller's own search_path objects reach nothing inside the functions: a table, a sequence and functions
-- named like the ones the verbs use, first on the path, each of which would fail loudly if used.
CREATE TABLE regress_decoy.idem_keys (
  scope text, key text, fingerprint bytea, token bigint, attempt integer, created_at timestamptz,
  claimed_at timestamptz, lease_ends_at timestamptz, finished_at timestamptz, expires_at timestamptz,
  status_code integer, response jsonb, response_bytes bytea, headers jsonb, checkpoint text,
  checkpoint_state jsonb, PRIMARY KEY (scope, key));
CREATE SEQUENCE regress_decoy.idem_keys_token_seq START 900000000;
CREATE FUNCTION regress_decoy.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'decoy clock_timestamp() was called'; END $$;
CREATE FUNCTION regress_decoy.sha256(bytea) RETURNS bytea LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'decoy sha256() was called'; END $$;
CREATE FUNCTION regress_decoy.idem_fingerprint(jsonb) RETURNS bytea LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'decoy idem_fingerprint() was called'; END $$;
CREATE FUNCTION regress_decoy.idem_keys_setting(text) RETURNS bigint LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'decoy idem_keys_setting() was called'; END $$;
CREATE FUNCTION regress_decoy.idem_keys_protected(text) RETURNS text LANGUAGE sql AS $$ SELECT 'off' $$;
CREATE FUNCTION regress_decoy.pg_is_in_recovery() RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
SET search_path = regress_decoy, pg_catalog, public;
SELECT (r).outcome, (r).token < 900000000 AS real_token FROM (SELECT idem_claim('sec', 'k2', '{"a": 1}'::jsonb) r) s;
SELECT (r).outcome, (r).status_code FROM (SELECT idem_claim('sec', 'k', '{"a": 1}'::jsonb) r) s;
SELECT (idem_claim('sec', 'k3', '\x01'::bytea)).outcome;
SELECT (idem_lookup('sec', 'k2')).outcome;
SELECT count(*) AS rows_in_the_decoy_table FROM regress_decoy.idem_keys;
RESET search_path;

-- The size cap protects the table from its callers: a caller's SET cannot lift it (the owner's 1 MB holds),
-- though it may lower it for its own session.
SELECT (idem_claim('cap', 'k', '{}'::jsonb)).token AS cap_token \gset
SET idem_keys.max_response_bytes = '1GB';
SELECT idem_finish('cap', 'k', :cap_token, 200, to_jsonb(repeat('x', 2000000)));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('cap', 'k', :cap_token, 200, '{}'::jsonb, headers => jsonb_build_object('h', repeat('x', 2000000)));
\echo :LAST_ERROR_SQLSTATE
-- A value that arrives compressed (here from a table) is measured as the extension measures it: decompressed.
CREATE TEMP TABLE big AS SELECT to_jsonb(repeat('x', 2000000)) AS body;
SELECT pg_column_compression(body) IS NOT NULL AS stored_compressed, pg_column_size(body) < 1048576 AS stored_small FROM big;
SELECT idem_finish('cap', 'k', :cap_token, 200, body) FROM big;
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.max_response_bytes = '100B';
SELECT idem_finish('cap', 'k', :cap_token, 200, to_jsonb(repeat('x', 200)));
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.max_response_bytes;
SELECT (idem_lookup('cap', 'k')).outcome AS nothing_was_stored;
\c - postgres
DROP SCHEMA regress_decoy CASCADE;
DELETE FROM idem_keys WHERE scope IN ('sec', 'cap');
DROP ROLE regress_portable_app;
