\set k random(1, 10000)
SELECT (idem_claim('s', 'k' || :k, '{"a": 1}'::jsonb)).outcome;
