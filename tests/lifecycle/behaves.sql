-- After a restore or a failover: the keys answer as they did before. :max_token is the largest token the
-- source had handed out; new ones must be larger (a restored sequence never reissues a dead owner's token).
\set ON_ERROR_STOP 1
DO $$
DECLARE r idem_result; max_token bigint := current_setting('life.max_token')::bigint;
BEGIN
    r := idem_claim('life', 'json', '{"amount": 1}'::jsonb);
    ASSERT r.outcome = 'replay' AND r.status_code = 201 AND r.response = '{"charge": "ch_1"}'
       AND r.headers = '{"Location": "/ch_1"}', format('json: %s', r);
    r := idem_claim('life', 'bytes', '\x01'::bytea);
    ASSERT r.outcome = 'replay' AND r.response_bytes = '\xcafe', format('bytes: %s', r);
    r := idem_claim('life', 'live', '{"amount": 2}'::jsonb);
    ASSERT r.outcome = 'in_progress' AND r.checkpoint = 'charged', format('live: %s', r);
    r := idem_claim('life', 'stale', '{"amount": 3}'::jsonb);
    ASSERT r.outcome = 'recovered' AND r.attempt = 2 AND r.token > max_token, format('stale: %s', r);
    r := idem_claim('life', 'expired', '{"amount": 4}'::jsonb);
    ASSERT r.outcome = 'claimed' AND r.token > max_token, format('expired: %s', r);
    r := idem_claim('life', 'json', '{"amount": 9}'::jsonb);
    ASSERT r.outcome = 'mismatch', format('mismatch: %s', r);
    r := idem_claim('life', 'new', '{}'::jsonb);
    ASSERT r.outcome = 'claimed' AND r.token > max_token, format('new: %s', r);
END $$;
