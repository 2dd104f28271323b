-- Keys in every state, through the API: finished (jsonb, bytea, with headers), in progress with a
-- checkpoint, stale (lease over), an expired answer.
\set ON_ERROR_STOP 1
SELECT idem_finish('life', 'json', (idem_claim('life', 'json', '{"amount": 1}'::jsonb)).token, 201,
                   '{"charge": "ch_1"}'::jsonb, headers => '{"Location": "/ch_1"}');
SELECT idem_finish('life', 'bytes', (idem_claim('life', 'bytes', '\x01'::bytea)).token, 200, '\xcafe'::bytea);
SELECT idem_checkpoint('life', 'live', (idem_claim('life', 'live', '{"amount": 2}'::jsonb, lease => '1 hour')).token,
                       'charged', '{"charge": "ch_2"}');
SELECT idem_claim('life', 'stale', '{"amount": 3}'::jsonb, lease => '1 millisecond');
SELECT idem_finish('life', 'expired', (idem_claim('life', 'expired', '{"amount": 4}'::jsonb)).token, 200,
                   NULL::jsonb, retention => '1 millisecond');
SELECT pg_sleep(0.01);
