\set k random(1, 10000)
SELECT (idem_claim_nosd('s', 'k' || :k, '{"a": 1}'::jsonb)).outcome;
