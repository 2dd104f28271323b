\set k random(1, 10000)
SELECT (idem_lookup('s', 'k' || :k)).outcome;
