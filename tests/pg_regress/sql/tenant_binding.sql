-- Tenant binding: with idem_keys.tenant_binding on, a caller uses only its tenant's scopes (the tenant's name,
-- or the name followed by ':'), whatever it tries; 42501 tells it nothing about the other tenants' keys.
\set SHOW_CONTEXT never
CREATE ROLE regress_acme LOGIN;
CREATE ROLE regress_globex;
CREATE ROLE regress_gateway LOGIN NOINHERIT IN ROLE regress_acme, regress_globex;
CREATE ROLE regress_shared LOGIN;
CREATE ROLE regress_auditor LOGIN BYPASSRLS;
CREATE SCHEMA regress_own AUTHORIZATION regress_acme;
-- globex has a finished key and an unfinished one, made while binding is off.
SELECT (idem_claim('regress_globex:POST /payments', 'paid', '{"amount": 5}'::jsonb)).token AS paid \gset
SELECT idem_finish('regress_globex:POST /payments', 'paid', :paid, 201, '{"charge": "ch_1"}'::jsonb);
SELECT (idem_claim('regress_globex:POST /payments', 'open', '{"amount": 7}'::jsonb)).token AS open \gset
CREATE TABLE regress_globex_before AS SELECT * FROM idem_keys WHERE scope LIKE 'regress_globex%';
SELECT last_value AS tokens_before FROM idem_keys_token_seq \gset

-- Bad settings are refused with 22023 and change nothing.
SET idem_keys.tenant_binding = 'tenant';
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.tenant_setting = 'idem_keys.tenant_binding';
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.tenant_setting = 'app.ten ant';
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.tenant_claim = 'app_metadata..tenant_id';
\echo :LAST_ERROR_SQLSTATE
ALTER ROLE regress_nobody SET idem_keys.tenant_binding = 'role';
\echo :LAST_ERROR_SQLSTATE
SHOW idem_keys.tenant_binding;

-- A role per tenant: the tenant logs in as its own role.
ALTER ROLE regress_acme SET idem_keys.tenant_binding = 'role';
ALTER ROLE regress_gateway SET idem_keys.tenant_binding = 'role';
ALTER ROLE regress_auditor SET idem_keys.tenant_binding = 'role';
\c - regress_acme
\set SHOW_CONTEXT never
SELECT (idem_claim('regress_acme', 'k', '{}'::jsonb)).outcome;
SELECT (idem_claim('regress_acme:POST /payments', 'k', '{}'::jsonb)).outcome;
-- Another tenant's scope, and scopes that only look like ours.
SELECT idem_claim('regress_globex:POST /payments', 'paid', '{"amount": 5}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('regress_acme2', 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('', 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
-- The same answer for a key that exists and one that does not: nothing is revealed.
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_lookup('regress_globex:POST /payments', 'never-claimed');
\echo :LAST_ERROR_SQLSTATE
-- Probing tokens of another tenant's open key.
SELECT idem_finish('regress_globex:POST /payments', 'open', :open, 200, '{"stolen": true}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('regress_globex:POST /payments', 'open', :open, 200, '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('regress_globex:POST /payments', 'open', :open);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('regress_globex:POST /payments', 'open', :open, 'charged');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('regress_globex:POST /payments', 'x', '\x00'::bytea);
\echo :LAST_ERROR_SQLSTATE
-- Escapes: the setting (SET, RESET, set_config, SET LOCAL), another tenant's role, a function of its own
-- (SECURITY DEFINER changes the current user, not the role the tenant comes from), its own search_path.
SET idem_keys.tenant_binding = off;
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.tenant_binding;
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('idem_keys.tenant_binding', 'off', false);
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL idem_keys.tenant_binding = off;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET ROLE regress_globex;
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION regress_own.lend(scope text) RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = regress_own, public AS $$ SELECT (idem_lookup(scope, 'paid')).outcome::text $$;
SELECT regress_own.lend('regress_globex:POST /payments');
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION regress_own.current_user() RETURNS name LANGUAGE sql AS $$ SELECT 'regress_globex'::name $$;
SET search_path = regress_own, pg_temp, public;
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
RESET search_path;
SHOW idem_keys.tenant_binding;
-- A gateway that logs in once and sets the tenant's role per request: the tenant follows SET ROLE, and
-- the gateway's own name is a tenant of its own.
\c - regress_gateway
\set SHOW_CONTEXT never
SET ROLE regress_globex;
SELECT (idem_lookup('regress_globex:POST /payments', 'paid')).response;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SET ROLE regress_acme;
SELECT (idem_lookup('regress_acme', 'k')).outcome;
RESET ROLE;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
-- A BYPASSRLS role is not bound, as with row-level security: a reconciler sees every tenant.
\c - regress_auditor
SHOW idem_keys.tenant_binding;
SELECT (idem_lookup('regress_globex:POST /payments', 'paid')).outcome;
SELECT (idem_lookup('regress_acme', 'k')).outcome;

-- One shared role, the tenant in a setting the API layer sets per request.
\c - postgres
\set SHOW_CONTEXT never
ALTER ROLE regress_shared SET idem_keys.tenant_binding = 'setting';
\c - regress_shared
\set SHOW_CONTEXT never
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SET LOCAL app.tenant = 'regress_acme';
SELECT (idem_lookup('regress_acme', 'k')).outcome;
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SET app.tenant = '';
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SET app.tenant = 'regress_globex:POST /payments';
SELECT idem_lookup('regress_globex:POST /payments', 'paid');
\echo :LAST_ERROR_SQLSTATE
RESET app.tenant;
SET idem_keys.tenant_setting = 'app.me';
\echo :LAST_ERROR_SQLSTATE

-- One shared role, the tenant a claim of PostgREST's request.jwt.claims.
\c - postgres
\set SHOW_CONTEXT never
ALTER ROLE regress_shared SET idem_keys.tenant_binding = 'jwt';
ALTER ROLE regress_shared SET idem_keys.tenant_claim = 'app_metadata.tenant_id';
\c - regress_shared
\set SHOW_CONTEXT never
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('request.jwt.claims', '{"sub": "u1", "app_metadata": {"tenant_id": "regress_acme"}}', false) IS NOT NULL AS claims_set;
SELECT (idem_lookup('regress_acme', 'k')).outcome;
SELECT idem_lookup('u1', 'k');
\echo :LAST_ERROR_SQLSTATE
-- A new token in the same session: the tenant follows it.
SELECT set_config('request.jwt.claims', '{"sub": "u2", "app_metadata": {"tenant_id": "regress_globex"}}', false) IS NOT NULL AS claims_set;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT (idem_lookup('regress_globex:POST /payments', 'paid')).outcome;
SELECT set_config('request.jwt.claims', '{"sub": "u3"}', false) IS NOT NULL AS claims_set;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SELECT set_config('request.jwt.claims', 'not json', false) IS NOT NULL AS claims_set;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE

-- A SET made before the library loaded is dropped with a WARNING when it loads: binding stays on.
\c - regress_shared
\set SHOW_CONTEXT never
SET idem_keys.tenant_binding = off;
SELECT idem_lookup('regress_acme', 'k');
\echo :LAST_ERROR_SQLSTATE
SHOW idem_keys.tenant_binding;

-- Nothing was written for globex, and no refused claim took a token.
\c - postgres
SELECT count(*) AS globex_rows_changed
  FROM (SELECT * FROM idem_keys WHERE scope LIKE 'regress_globex%'
        EXCEPT SELECT * FROM regress_globex_before) changed;
SELECT count(*) AS globex_rows FROM idem_keys WHERE scope LIKE 'regress_globex%';
SELECT last_value - :tokens_before AS tokens_taken FROM idem_keys_token_seq;
DELETE FROM idem_keys WHERE scope LIKE 'regress_%';
DROP SCHEMA regress_own CASCADE;
DROP TABLE regress_globex_before;
DROP ROLE regress_gateway, regress_shared, regress_auditor, regress_acme, regress_globex;
