-- Keys in every state a move must keep (tests/portable/move.sh): a finished JSON answer, a finished raw one,
-- and an open claim with a checkpoint whose owner died (its lease ended). Prints the dead owner's token.
SELECT (idem_claim('moved', 'done', '{"currency": "EUR", "amount": 1.50}'::jsonb)).token AS t \gset
SELECT idem_finish('moved', 'done', :t, 201, '{"charge": "ch_1"}'::jsonb, '{"Location": "/ch_1"}'::jsonb);
SELECT (idem_claim('moved', 'raw', '\x00ff'::bytea)).token AS t \gset
SELECT idem_finish('moved', 'raw', :t, 200, '\x0102'::bytea);
SELECT (idem_claim('moved', 'open', '{"amount": 2}'::jsonb, lease => '1 hour')).token AS open \gset
SELECT idem_checkpoint('moved', 'open', :open, 'charged', '{"charge": "ch_9"}'::jsonb);
UPDATE idem_keys SET lease_ends_at = now() - interval '1 second' WHERE scope = 'moved' AND key = 'open';
\echo :open
