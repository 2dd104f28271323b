-- One claim call for any body: idem_claim(scope, key, request bytea, is_json boolean). Bytes that parse as
-- JSON (with is_json) get the jsonb form's fingerprint, anything else the bytea form's: a second claim of the
-- same key through the other form answers in_progress (same request), never mismatch.
\set VERBOSITY terse
-- JSON, spelled differently from the jsonb it equals (key order, spaces, 1.0 for 1, a duplicate key)
SELECT outcome FROM idem_claim('body', 'json', convert_to('{"b": 2, "a": 1.0, "b": 1}', 'UTF8'), true);
SELECT outcome FROM idem_claim('body', 'json', '{"a": 1, "b": 1}'::jsonb);
SELECT outcome FROM idem_claim('body', 'json', '{"a": 1, "b": 2}'::jsonb);
-- non-ASCII JSON
SELECT outcome FROM idem_claim('body', 'utf8', convert_to('{"name": "Zoë", "city": "Tōkyō"}', 'UTF8'), true);
SELECT outcome FROM idem_claim('body', 'utf8', '{"city": "Tōkyō", "name": "Zoë"}'::jsonb);
-- not JSON, not UTF-8, JSON that jsonb refuses (a number past numeric's range, a NUL escape), or is_json
-- false: the bytes' fingerprint
SELECT outcome FROM idem_claim('body', 'text', convert_to('amount=1000&currency=EUR', 'UTF8'), true);
SELECT outcome FROM idem_claim('body', 'text', convert_to('amount=1000&currency=EUR', 'UTF8'));
SELECT outcome FROM idem_claim('body', 'latin1', '\x7b2261223a22e9227d'::bytea, true);
SELECT outcome FROM idem_claim('body', 'latin1', '\x7b2261223a22e9227d'::bytea);
SELECT outcome FROM idem_claim('body', 'huge', convert_to('[1e1000000]', 'UTF8'), true);
SELECT outcome FROM idem_claim('body', 'huge', convert_to('[1e1000000]', 'UTF8'));
SELECT outcome FROM idem_claim('body', 'nul', convert_to('["\u0000"]', 'UTF8'), true);
SELECT outcome FROM idem_claim('body', 'nul', convert_to('["\u0000"]', 'UTF8'));
SELECT outcome FROM idem_claim('body', 'told', convert_to('{"a":1}', 'UTF8'), false);
SELECT outcome FROM idem_claim('body', 'told', convert_to('{"a":1}', 'UTF8'));
SELECT outcome FROM idem_claim('body', 'told', '{"a": 1}'::jsonb);
-- the fingerprints themselves, against idem_fingerprint of each form
SELECT fingerprint = idem_fingerprint('{"a": 1, "b": 1}'::jsonb) AS json_as_jsonb
  FROM idem_keys WHERE scope = 'body' AND key = 'json';
SELECT fingerprint = idem_fingerprint(convert_to('amount=1000&currency=EUR', 'UTF8')) AS text_as_bytes
  FROM idem_keys WHERE scope = 'body' AND key = 'text';
-- NULLs: 22004, nothing written
SELECT outcome FROM idem_claim('body', 'null', NULL::bytea, true);
SELECT outcome FROM idem_claim('body', 'null', '\x00'::bytea, NULL::boolean);
SELECT count(*) AS null_rows FROM idem_keys WHERE scope = 'body' AND key = 'null';
DELETE FROM idem_keys WHERE scope = 'body';
\set VERBOSITY default
