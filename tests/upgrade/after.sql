-- Runs after ALTER EXTENSION idem_keys UPDATE: every key and answer survived, and the new surface works.
\set ON_ERROR_STOP 1
DO $$
DECLARE
    r idem_result;
    live bigint := (SELECT token FROM fixture WHERE name = 'live');
    stale bigint := (SELECT token FROM fixture WHERE name = 'stale');
BEGIN
    ASSERT (SELECT extversion FROM pg_extension WHERE extname = 'idem_keys')
         = (SELECT default_version FROM pg_available_extensions WHERE name = 'idem_keys');
    r := idem_claim('up', 'json', '{"a": 3}'::jsonb);
    ASSERT r.outcome = 'replay' AND r.status_code = 201 AND r.response = '{"charge": "ch_1"}'
       AND r.headers = '{"Location": "/ch_1"}' AND r.checkpoint IS NULL, format('json: %s', r);
    r := idem_claim('up', 'bytes', '\x0102'::bytea);
    ASSERT r.outcome = 'replay' AND r.response_bytes = '\xcafe', format('bytes: %s', r);
    r := idem_lookup('up', 'live');
    ASSERT r.outcome = 'in_progress' AND r.checkpoint IS NULL, format('live: %s', r);
    PERFORM idem_checkpoint('up', 'live', live, 'charged', '{"charge": "ch_9"}');
    r := idem_claim('up', 'live', '{"a": 1}'::jsonb);
    ASSERT r.outcome = 'in_progress' AND r.checkpoint = 'charged'
       AND r.checkpoint_state = '{"charge": "ch_9"}', format('live after checkpoint: %s', r);
    PERFORM idem_finish('up', 'live', live, 200, '{"ok": true}'::jsonb);
    r := idem_claim('up', 'stale', '{"a": 2}'::jsonb);
    ASSERT r.outcome = 'recovered' AND r.attempt = 2 AND r.token > stale, format('stale: %s', r);
    r := idem_claim('up', 'expired', '{"a": 5}'::jsonb);
    ASSERT r.outcome = 'claimed' AND r.attempt = 1, format('expired: %s', r);
    r := idem_claim('up', 'new', '{"a": 9}'::jsonb, wait => '10 milliseconds');
    ASSERT r.outcome = 'claimed', format('new: %s', r);
    ASSERT (SELECT count(*) FROM idem_keys) = 6;
END $$;
-- The upgraded table is one the direct path serves (its primary key and hash index in the C collation): a
-- replay there draws no token, where the SPI statement's insert attempt would draw one.
DO $$
DECLARE
    drawn bigint := pg_sequence_last_value('idem_keys_token_seq');
    r idem_result;
BEGIN
    r := idem_claim('up', 'bytes', '\x0102'::bytea);
    ASSERT r.outcome = 'replay', format('bytes again: %s', r);
    ASSERT pg_sequence_last_value('idem_keys_token_seq') = drawn, 'a replay of the upgraded table went to SPI';
END $$;
-- 0.3.0's paced sweep deletes an expired key in committed batches.
UPDATE idem_keys SET finished_at = now() - interval '2 days', expires_at = now() - interval '1 day',
                     status_code = 200, response = '{}'
 WHERE scope = 'up' AND key = 'json';
CALL idem_sweep_paced(batch_size => 1, delay => '0');
DO $$
BEGIN
    ASSERT (SELECT count(*) FROM idem_keys) = 5;
    ASSERT NOT EXISTS (SELECT FROM idem_keys WHERE key = 'json');
END $$;
SELECT 'upgrade checks passed' AS result;
