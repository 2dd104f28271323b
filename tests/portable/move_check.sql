-- After a move (tests/portable/move.sh), in the other edition: every key replays, the open claim is recovered
-- with a larger token and its checkpoint, the dead owner's token is refused (55000), and new tokens are
-- larger than every moved one. Run with move.old_token set to the dead owner's token.
DO $$
DECLARE
    old bigint := current_setting('move.old_token')::bigint;
    largest bigint := (SELECT max(token) FROM idem_keys);
    r idem_result;
BEGIN
    r := idem_claim('moved', 'done', '{"amount": 1.5, "currency": "EUR"}'::jsonb);
    IF r.outcome IS DISTINCT FROM 'replay' OR r.status_code IS DISTINCT FROM 201
       OR r.response IS DISTINCT FROM '{"charge": "ch_1"}' OR r.headers IS DISTINCT FROM '{"Location": "/ch_1"}' THEN
        RAISE EXCEPTION 'the finished JSON key did not replay: %', r;
    END IF;
    r := idem_claim('moved', 'raw', '\x00ff'::bytea);
    IF r.outcome IS DISTINCT FROM 'replay' OR r.response_bytes IS DISTINCT FROM '\x0102'::bytea THEN
        RAISE EXCEPTION 'the finished raw key did not replay: %', r;
    END IF;
    r := idem_claim('moved', 'open', '{"amount": 2.0}'::jsonb);
    IF r.outcome IS DISTINCT FROM 'recovered' OR NOT r.token > old OR r.checkpoint IS DISTINCT FROM 'charged'
       OR r.checkpoint_state IS DISTINCT FROM '{"charge": "ch_9"}' THEN
        RAISE EXCEPTION 'the open claim was not recovered with a larger token and its checkpoint: % (old token %)', r, old;
    END IF;
    BEGIN
        PERFORM idem_finish('moved', 'open', old, 200, '{"late": true}'::jsonb);
        RAISE EXCEPTION 'the dead owner''s token % finished the moved key', old;
    EXCEPTION WHEN object_not_in_prerequisite_state THEN
        NULL; -- 55000, as it must be
    END;
    PERFORM idem_finish('moved', 'open', r.token, 201, '{"charge": "ch_9"}'::jsonb);
    r := idem_claim('moved', 'new', '{}'::jsonb);
    IF NOT r.token > largest THEN
        RAISE EXCEPTION 'a new key got token %, not larger than the moved %', r.token, largest;
    END IF;
END
$$;
