-- Every bad input: a clear message, its SQLSTATE (docs/errors.md), and nothing written.
\set SHOW_CONTEXT never
SELECT setval('idem_keys_token_seq', 200) \gset
SELECT (idem_claim('err', 'k', '{}'::jsonb)).token AS t \gset
CREATE TEMP TABLE before AS SELECT * FROM idem_keys;
SELECT idem_claim(NULL, 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('err', NULL, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('err', 'k', NULL::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', NULL, 200, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', :t, NULL, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('err', '', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('err', repeat('k', 256), '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim(repeat('s', 256), 'k', '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('err', 'k', '{}'::jsonb, lease => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', :t, 600, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', :t, 200, '{}'::jsonb, headers => '["Location"]'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', :t, 200, '{}'::jsonb, retention => '-1 hour');
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.max_response_bytes = '1kB';
SELECT idem_finish('err', 'k', :t, 200, to_jsonb(repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', :t, 200, '{}'::jsonb, headers => jsonb_build_object('Link', repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.max_response_bytes;
SELECT idem_finish('err', 'nobody', :t, 200, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_finish('err', 'k', :t + 1000, 200, '{}'::jsonb);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_claim('err', 'k', '{}'::jsonb, wait => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('err', 'k', :t, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('err', 'k', NULL, 'charged');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('err', 'k', :t, '');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('err', 'k', :t, repeat('p', 256));
\echo :LAST_ERROR_SQLSTATE
SET idem_keys.max_response_bytes = '1kB';
SELECT idem_checkpoint('err', 'k', :t, 'charged', to_jsonb(repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
RESET idem_keys.max_response_bytes;
SELECT idem_checkpoint('err', 'nobody', :t, 'charged');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_checkpoint('err', 'k', :t + 1000, 'charged');
\echo :LAST_ERROR_SQLSTATE
SELECT idem_sweep(batch_size => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM idem_stale(max_rows => NULL);
\echo :LAST_ERROR_SQLSTATE
-- nothing changed
SELECT count(*) AS changed_rows FROM (
  (SELECT * FROM idem_keys EXCEPT SELECT * FROM before) UNION ALL (SELECT * FROM before EXCEPT SELECT * FROM idem_keys)) d;
