-- idem_claim: every outcome, as a user sees it. Tokens and times vary, so we print facts about them.
\set SHOW_CONTEXT never
SELECT (r).outcome, (r).token IS NOT NULL AS has_token, (r).attempt, (r).retry_after
  FROM (SELECT idem_claim('shop', 'pay-1', '{"amount": 1000, "currency": "EUR"}'::jsonb) r) s;
-- the double tap: in progress, told to come back within the 5 minute lease, no token
SELECT (r).outcome, (r).token, (r).attempt, (r).retry_after BETWEEN 1 AND 300 AS retry_within_lease
  FROM (SELECT idem_claim('shop', 'pay-1', '{"currency": "EUR", "amount": 1000}'::jsonb) r) s;
-- a different body under the same key
SELECT (r).outcome, (r).token, (r).status_code, (r).response
  FROM (SELECT idem_claim('shop', 'pay-1', '{"amount": 1}'::jsonb) r) s;
-- finish, then every retry replays the stored answer
SELECT idem_finish('shop', 'pay-1', (SELECT token FROM idem_keys WHERE key = 'pay-1'), 201,
                   '{"charge": "ch_1"}'::jsonb, '{"Location": "/ch_1"}'::jsonb);
SELECT r.outcome, r.token, r.attempt, r.status_code, r.response, r.headers, r.retry_after
  FROM idem_claim('shop', 'pay-1', '{"amount": 1000.00, "currency": "EUR"}'::jsonb) AS r;
-- scopes are separate namespaces
SELECT (idem_claim('other-shop', 'pay-1', '{"amount": 1}'::jsonb)).outcome;
-- a dead owner: its lease ended without a finish
SELECT (idem_claim('shop', 'pay-2', '{}'::jsonb, lease => '1 hour')).outcome;
UPDATE idem_keys SET lease_ends_at = now() - interval '1 second' WHERE key = 'pay-2';
SELECT (r).outcome, (r).token IS NOT NULL AS has_token, (r).attempt
  FROM (SELECT idem_claim('shop', 'pay-2', '{}'::jsonb) r) s;
-- an answer past its retention counts as absent, swept or not
SELECT idem_finish('shop', 'pay-2', (SELECT token FROM idem_keys WHERE key = 'pay-2'), 200, NULL::jsonb);
UPDATE idem_keys SET expires_at = now() - interval '1 second' WHERE key = 'pay-2';
SELECT (r).outcome, (r).attempt FROM (SELECT idem_claim('shop', 'pay-2', '[1, 2]'::jsonb) r) s;
-- raw bodies
SELECT (idem_claim('raw', 'k', '\x00ff'::bytea)).outcome, (idem_claim('raw', 'k', '\x00ff'::bytea)).outcome AS again,
       (idem_claim('raw', 'k', '\x00fe'::bytea)).outcome AS other_body;
-- an untyped literal is ambiguous between the jsonb and bytea forms: cast it
SELECT idem_claim('shop', 'pay-3', '{}');
