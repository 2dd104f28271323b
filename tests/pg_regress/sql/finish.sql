-- idem_finish and idem_release: fenced by the token.
\set SHOW_CONTEXT never
-- tokens appear in messages below; start them at a known value
SELECT setval('idem_keys_token_seq', 100) \gset
SELECT (idem_claim('fin', 'k', '{}'::jsonb)).token AS t \gset
SELECT idem_finish('fin', 'k', :t, 200, '{"ok": true}'::jsonb, retention => '1 hour');
SELECT status_code, response, headers, expires_at - finished_at AS retention FROM idem_keys WHERE scope = 'fin';
-- the same finish again is a no-op
SELECT idem_finish('fin', 'k', :t, 200, '{"ok": true}'::jsonb);
-- a different answer is refused
SELECT idem_finish('fin', 'k', :t, 500, '{"ok": false}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
-- a token that lost the key to a recovery is fenced out
SELECT (idem_claim('fin', 'k2', '{}'::jsonb)).token AS old \gset
UPDATE idem_keys SET lease_ends_at = now() - interval '1 second' WHERE scope = 'fin' AND key = 'k2';
SELECT (idem_claim('fin', 'k2', '{}'::jsonb)).token AS new \gset
SELECT :new > :old AS tokens_grow;
SELECT idem_finish('fin', 'k2', :old, 200, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('fin', 'k2', :old) AS stale_release;
SELECT idem_release('fin', 'k2', :new) AS owner_release;
SELECT count(*) AS rows_after_release FROM idem_keys WHERE scope = 'fin' AND key = 'k2';
SELECT (idem_claim('fin', 'k2', '{}'::jsonb)).attempt AS attempt_after_release;
-- unknown keys
SELECT idem_finish('fin', 'nobody', 1, 200, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_release('fin', 'nobody', 1);
\echo :LAST_ERROR_SQLSTATE
