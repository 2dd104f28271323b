-- An application role with no table privilege: the API works, direct access does not.
\set SHOW_CONTEXT never
CREATE ROLE regress_idem_app;
SET ROLE regress_idem_app;
SELECT (idem_claim('sec', 'k', '{}'::jsonb)).outcome;
SELECT (idem_lookup('sec', 'k')).outcome;
SELECT * FROM idem_keys;
\echo :LAST_ERROR_SQLSTATE
DELETE FROM idem_keys;
\echo :LAST_ERROR_SQLSTATE
SELECT idem_sweep();
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_stats();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_idem_app;
-- The size cap protects the table from its callers, so they cannot lift it: a SET made before the library
-- was loaded is dropped when it loads, one made after is refused, and headers are capped like responses.
CREATE ROLE regress_idem_capped LOGIN;
\c - regress_idem_capped
\set SHOW_CONTEXT never
SET idem_keys.max_response_bytes = '1GB';
SELECT (idem_claim('cap', 'k', '{}'::jsonb)).token AS cap_token \gset
SHOW idem_keys.max_response_bytes;
SET idem_keys.max_response_bytes = '1GB';
\echo :LAST_ERROR_SQLSTATE
SHOW idem_keys.max_response_bytes;
SELECT idem_finish('cap', 'k', :cap_token, 200, '{}'::jsonb, headers => jsonb_build_object('h', repeat('x', 2000000)));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('cap', 'k', :cap_token, 200, to_jsonb(repeat('x', 2000000)));
\echo :LAST_ERROR_SQLSTATE
SELECT (idem_lookup('cap', 'k')).outcome AS nothing_was_stored;
\c - postgres
DELETE FROM idem_keys WHERE scope = 'cap';
DROP ROLE regress_idem_capped;
