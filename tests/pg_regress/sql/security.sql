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
