-- Tenant binding in the portable edition: the owner turns it on for every caller (idem_keys_configure), and
-- no caller can turn it off or choose its tenant: the extension's rules, errors and escapes refused.
\set SHOW_CONTEXT never
CREATE ROLE regress_acme LOGIN;
CREATE ROLE regress_globex;
CREATE ROLE regress_gateway LOGIN NOINHERIT IN ROLE regress_acme, regress_globex;
CREATE ROLE regress_shared LOGIN;
CREATE ROLE regress_auditor LOGIN BYPASSRLS;
CREATE SCHEMA regress_own AUTHORIZATION regress_acme;
SELECT (idem_claim('regress_globex:POST /payments', 'paid', '{"amount": 5}'::jsonb)).token AS paid \gset
SELECT idem_finish('regress_globex:POST /payments', 'paid', :paid, 201, '{"charge": "ch_1"}'::jsonb);
SELECT (idem_claim('regress_globex:POST /payments', 'open', '{"amount": 7}'::jsonb)).token AS open \gset
CREATE TABLE regress_globex_before AS SELECT * FROM idem_keys WHERE scope LIKE 'regress_globex%';
SELECT last_value AS tokens_before FROM idem_keys_token_seq \gset

CREATE FUNCTION public.globex_lookup() RETURNS text LANGUAGE sql SECURITY DEFINER
  AS $$ SELECT (idem_lookup('regress_globex:POST /payments', 'paid')).outcome $$;
ALTER FUNCTION public.globex_lookup() OWNER TO regress_globex;
GRANT EXECUTE ON FUNCTION public.globex_lookup() TO regress_acme;
-- A role per tenant.
SELECT idem_keys_configure('idem_keys.tenant_binding', 'role');
\c - regress_acme
\set SHOW_CONTEXT never
SELECT (idem_claim('regress_acme', 'k', '{}'::jsonb)).outcome;
SELECT (idem_claim('regress_acme:POST /payments', 'k', '{}'::jsonb)).outcome;
SELECT idem_claim('regress_globex:POST /payments', 'paid', '{"amount": 5}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('regress_acme2', 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('', 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_lookup('regress_globex:POST /payments', 'never-claimed');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('regress_globex:POST /payments', 'open', :open, 200, '{"stolen": true}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('regress_globex:POST /payments', 'open', :open);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('regress_globex:POST /payments', 'open', :open, 'charged');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('regress_globex:POST /payments', 'x', '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
-- Escapes: the placeholders a caller may SET change nothing; SET ROLE needs membership; its own SECURITY
-- DEFINER function and search_path lend it no other identity.
SET idem_keys.tenant_binding = 'off';
SELECT idem_claim('regress_globex:POST /payments', 'x', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('idem_keys.tenant_binding', 'off', false) AS set, idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.tenant_binding;
SET ROLE regress_globex;
\echo :LAST_ERROR_SQLSTATE
-- globex's own SECURITY DEFINER function, which acme may call, runs as globex but acme is still the caller.
SELECT public.globex_lookup();
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION regress_own.current_setting(text) RETURNS text LANGUAGE sql AS $$ SELECT 'none' $$;
CREATE FUNCTION regress_own.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'regress_globex' $$;
CREATE FUNCTION regress_own.idem_keys_binding() RETURNS text LANGUAGE sql AS $$ SELECT 'off' $$;
SET search_path = regress_own, pg_catalog, public;
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
RESET search_path;
-- A gateway that SET ROLEs per request: the tenant follows SET ROLE; its own name is a tenant of its own.
\c - regress_gateway
\set SHOW_CONTEXT never
SELECT (idem_claim('regress_gateway', 'k', '{}'::jsonb)).outcome;
SET ROLE regress_acme;
SELECT (idem_claim('regress_acme', 'k', '{}'::jsonb)).outcome;
SELECT idem_claim('regress_gateway', 'k2', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- A BYPASSRLS auditor is not bound.
\c - regress_auditor
SELECT (idem_lookup('regress_globex:POST /payments', 'paid')).outcome AS auditor_reads;

-- One shared role, the tenant in a setting an API layer sets per request.
\c - postgres
SELECT idem_keys_configure('idem_keys.tenant_binding', 'setting');
\c - regress_shared
\set SHOW_CONTEXT never
SELECT idem_claim('regress_acme', 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL app.tenant = 'regress_acme';
SELECT (idem_claim('regress_acme', 'k', '{}'::jsonb)).outcome;
SELECT idem_claim('regress_globex:POST /payments', 'paid', '{"amount": 5}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET app.tenant = 'regress_acme:POST';
SELECT idem_claim('regress_acme:POST', 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
RESET app.tenant;
-- PostgREST's request.jwt.claims, with a nested claim.
\c - postgres
SELECT idem_keys_configure('idem_keys.tenant_binding', 'jwt');
SELECT idem_keys_configure('idem_keys.tenant_claim', 'app_metadata.tenant_id');
\c - regress_shared
\set SHOW_CONTEXT never
SELECT set_config('request.jwt.claims', '{"sub": "u1", "app_metadata": {"tenant_id": "regress_acme"}}', false) IS NOT NULL AS token_set;
SELECT (idem_lookup('regress_acme', 'k')).outcome;
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('request.jwt.claims', '{"sub": "u1"}', false) IS NOT NULL AS token_set;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('request.jwt.claims', 'not json', false) IS NOT NULL AS token_set;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('request.jwt.claims', '{"app_metadata": {"tenant_id": 42}}', false) IS NOT NULL AS token_set;
SELECT idem_claim('42:GET', 'k', '{}'::jsonb) IS NOT NULL AS number_tenant_claims;

-- Nothing of globex's changed, and only the callers' own keys took tokens.
\c - postgres
SELECT idem_keys_configure('idem_keys.tenant_binding', NULL), idem_keys_configure('idem_keys.tenant_claim', NULL);
SELECT count(*) AS changed FROM (
  (SELECT * FROM idem_keys WHERE scope LIKE 'regress_globex%' EXCEPT SELECT * FROM regress_globex_before)
  UNION ALL (SELECT * FROM regress_globex_before EXCEPT SELECT * FROM idem_keys WHERE scope LIKE 'regress_globex%')) d;
SELECT scope, key FROM idem_keys WHERE scope NOT LIKE 'regress_globex%' ORDER BY 1, 2;
DELETE FROM idem_keys WHERE scope LIKE 'regress%' OR scope LIKE '42%';
DROP TABLE regress_globex_before;
DROP SCHEMA regress_own CASCADE;
DROP FUNCTION public.globex_lookup();
DROP ROLE regress_acme, regress_globex, regress_gateway, regress_shared, regress_auditor;
