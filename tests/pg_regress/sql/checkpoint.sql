-- idem_checkpoint: recovery points as data. The owner records how far it got; whoever recovers the key
-- after the owner dies resumes from there. Only the current token may checkpoint.
\set SHOW_CONTEXT never
SELECT setval('idem_keys_token_seq', 300) \gset
SELECT (idem_claim('cp', 'order-1', '{"sku": "A"}'::jsonb, lease => '1 hour')).token AS t \gset
-- a fresh claim has no checkpoint
SELECT (r).outcome, (r).checkpoint, (r).checkpoint_state
  FROM (SELECT idem_lookup('cp', 'order-1') r) s;
SELECT idem_checkpoint('cp', 'order-1', :t, 'stock_reserved');
SELECT idem_checkpoint('cp', 'order-1', :t, 'charged', '{"charge": "ch_1", "amount": 1000}'::jsonb);
-- a retry while the owner works sees how far it got (in_progress carries the checkpoint)
SELECT (r).outcome, (r).token, (r).checkpoint, (r).checkpoint_state
  FROM (SELECT idem_claim('cp', 'order-1', '{"sku": "A"}'::jsonb) r) s;
-- the owner dies; after its lease the retry recovers the key and resumes from "charged"
UPDATE idem_keys SET lease_ends_at = now() - interval '1 second' WHERE key = 'order-1';
SELECT (r).outcome, (r).attempt, (r).token > :t AS newer_token, (r).checkpoint, (r).checkpoint_state
  FROM (SELECT idem_claim('cp', 'order-1', '{"sku": "A"}'::jsonb) r) s;
-- the dead owner's late checkpoint is fenced out
SELECT idem_checkpoint('cp', 'order-1', :t, 'emailed');
\echo :LAST_ERROR_SQLSTATE
-- the new owner finishes; replays carry the answer, not the checkpoint
SELECT idem_finish('cp', 'order-1', (SELECT token FROM idem_keys WHERE key = 'order-1'), 201, '{"order": 1}'::jsonb);
SELECT (r).outcome, (r).status_code, (r).response, (r).checkpoint, (r).checkpoint_state
  FROM (SELECT idem_claim('cp', 'order-1', '{"sku": "A"}'::jsonb) r) s;
SELECT idem_checkpoint('cp', 'order-1', (SELECT token FROM idem_keys WHERE key = 'order-1'), 'late');
\echo :LAST_ERROR_SQLSTATE
-- an expired answer starts over without the old checkpoint
UPDATE idem_keys SET expires_at = now() - interval '1 second' WHERE key = 'order-1';
SELECT (r).outcome, (r).attempt, (r).checkpoint FROM (SELECT idem_claim('cp', 'order-1', '{"sku": "A"}'::jsonb) r) s;
