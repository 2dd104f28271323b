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
-- The HTTP form: method, target and body, fingerprinted as the middlewares' two statements did (the jsonb one,
-- then the bytea one if the body did not parse), in one call
SELECT outcome FROM idem_claim('body', 'http', 'POST', '/payments', convert_to('{"amount": 1000, "currency": "EUR"}', 'UTF8'), true);
SELECT fingerprint = idem_fingerprint(jsonb_build_object('method', 'POST', 'target', '/payments',
         'body', '{"currency": "EUR", "amount": 1000.0}'::jsonb)) AS http_json_as_before
  FROM idem_keys WHERE scope = 'body' AND key = 'http';
SELECT outcome FROM idem_claim('body', 'http form', 'POST', '/payments?x="1"', convert_to('amount=1000', 'UTF8'), true);
SELECT fingerprint = sha256(convert_to('POST /payments?x="1"' || E'\n' || 'amount=1000', 'UTF8')) AS http_bytes_as_before
  FROM idem_keys WHERE scope = 'body' AND key = 'http form';
-- a body that is not JSON alone cannot reach into the object around it: bytes
SELECT outcome FROM idem_claim('body', 'http reach', 'POST', '/p', convert_to('1, "method": "GET"', 'UTF8'), true);
SELECT fingerprint = sha256(convert_to('POST /p' || E'\n' || '1, "method": "GET"', 'UTF8')) AS reach_is_bytes
  FROM idem_keys WHERE scope = 'body' AND key = 'http reach';
-- NULLs: 22004, nothing written
SELECT outcome FROM idem_claim('body', 'null', NULL::bytea, true);
SELECT outcome FROM idem_claim('body', 'null', '\x00'::bytea, NULL::boolean);
SELECT outcome FROM idem_claim('body', 'null', NULL::text, '/', '\x00'::bytea, true);
SELECT outcome FROM idem_claim('body', 'null', 'POST', NULL::text, '\x00'::bytea, true);
SELECT outcome FROM idem_claim('body', 'null', 'POST', '/', '\x00'::bytea, NULL::boolean);
SELECT count(*) AS null_rows FROM idem_keys WHERE scope = 'body' AND key = 'null';
DELETE FROM idem_keys WHERE scope = 'body';
\set VERBOSITY default
