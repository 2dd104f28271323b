-- Settings without a loaded module: the extension's names, defaults, bounds and units, read when used, with
-- the errors PostgreSQL gives when the extension's settings are SET out of range; and the protected ones,
-- which only the owner changes (idem_keys_configure).
\set SHOW_CONTEXT never
SELECT (idem_claim('set', 'default', '{}'::jsonb)).outcome;
SELECT lease_ends_at - claimed_at AS default_lease FROM idem_keys WHERE scope = 'set' AND key = 'default';
SET idem_keys.lease = '90min';
SELECT (idem_claim('set', 'lease', '{}'::jsonb)).outcome;
SELECT lease_ends_at - claimed_at AS lease FROM idem_keys WHERE scope = 'set' AND key = 'lease';
SET idem_keys.lease = 45;
SELECT (idem_claim('set', 'seconds', '{}'::jsonb)).outcome;
SELECT lease_ends_at - claimed_at AS lease FROM idem_keys WHERE scope = 'set' AND key = 'seconds';
SET idem_keys.retention = '2h';
SELECT idem_finish('set', 'seconds', (SELECT token FROM idem_keys WHERE scope = 'set' AND key = 'seconds'), 200, '{}'::jsonb);
SELECT expires_at - finished_at AS retention FROM idem_keys WHERE scope = 'set' AND key = 'seconds';
RESET idem_keys.retention;
-- Durations count as the extension counts them: a month is 30 days and a day 24 hours, whatever the calendar.
SELECT (idem_claim('set', 'month', '{}'::jsonb, lease => '1 mon')).token AS month_token \gset
SELECT lease_ends_at - claimed_at AS a_month_lease FROM idem_keys WHERE scope = 'set' AND key = 'month';
SELECT idem_finish('set', 'month', :month_token, 200, '{}'::jsonb, retention => '1 year');
SELECT expires_at - finished_at AS a_year_retention FROM idem_keys WHERE scope = 'set' AND key = 'month';
SELECT idem_claim('set', 'bad', '{}'::jsonb, lease => '1 year -361 days');
\echo :LAST_ERROR_SQLSTATE
-- out of range, malformed, a unit of the wrong kind: 22023, and nothing written
SET idem_keys.lease = 0;
SELECT idem_claim('set', 'bad', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.lease = 'soon';
SELECT idem_claim('set', 'bad', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.lease = '5MB';
SELECT idem_claim('set', 'bad', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.lease;
SET idem_keys.sweep_batch_size = 0;
SELECT idem_sweep();
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.sweep_batch_size;
SET idem_keys.sweep_delay = '11s';
CALL idem_sweep_paced();
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.sweep_delay;
SELECT count(*) AS bad_keys_written FROM idem_keys WHERE scope = 'set' AND key = 'bad';
-- With a synchronous standby, an idem_finish commits as if synchronous_commit were on, whatever the session
-- set, so no answer is replayable before the standby has it (the extension does the same).
-- (A reload reaches a backend between two statements: the sleep leaves it time to arrive.)
ALTER SYSTEM SET synchronous_standby_names = 'regress_no_standby';
SELECT pg_reload_conf(), pg_sleep(0.5);
SHOW synchronous_standby_names;
BEGIN;
SET LOCAL synchronous_commit = off;
SELECT (idem_claim('set', 'durable', '{}'::jsonb)).token AS durable_token \gset
SHOW synchronous_commit;
SELECT idem_finish('set', 'durable', :durable_token, 200, '{}'::jsonb);
SHOW synchronous_commit;
ROLLBACK;
ALTER SYSTEM RESET synchronous_standby_names;
SELECT pg_reload_conf(), pg_sleep(0.5);
SHOW synchronous_standby_names;
-- The protected settings: checked as the extension checks them, changed only by the owner.
SELECT idem_keys_configure('idem_keys.max_response_bytes', '2MB');
SELECT idem_keys_configure('idem_keys.max_response_bytes', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.max_response_bytes', NULL);
SELECT idem_keys_configure('idem_keys.tenant_binding', 'everyone');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.tenant_setting', 'idem_keys.tenant_binding');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.tenant_setting', 'app.ten ant');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.tenant_claim', 'app_metadata..tenant');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.lease', '1h');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure('idem_keys.no_such_setting', '1');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_keys_configure(NULL, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_keys_settings;
-- A caller's bad SET of the cap fails a finish only when there is an answer to measure.
SELECT (idem_claim('set', 'no_answer', '{}'::jsonb)).token AS no_answer_token \gset
SET idem_keys.max_response_bytes = 'plenty';
SELECT idem_finish('set', 'no_answer', :no_answer_token, 204, NULL::jsonb);
SELECT status_code, response IS NULL AS no_response FROM idem_keys WHERE scope = 'set' AND key = 'no_answer';
SELECT idem_finish('set', 'no_answer', :no_answer_token, 204, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.max_response_bytes;
DELETE FROM idem_keys WHERE scope = 'set';
