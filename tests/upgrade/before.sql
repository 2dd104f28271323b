-- Keys in every state, as the previous releases (0.1.0, 0.2.0, 0.3.0) stored them. Rows are written directly: those
-- releases' libraries are not built here, and their data is exactly these columns.
\set ON_ERROR_STOP 1
CREATE TABLE fixture (name text PRIMARY KEY, token bigint NOT NULL);
INSERT INTO fixture SELECT name, nextval('idem_keys_token_seq')
  FROM unnest(ARRAY['live', 'stale', 'json', 'bytes', 'expired']) AS name;
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at,
                       finished_at, expires_at, status_code, response, response_bytes, headers)
SELECT 'up', f.name, v.fp, f.token, 1, now(), now(), now() + v.lease, v.finished, v.expires, v.status,
       v.response, v.bytes, v.headers
  FROM fixture f JOIN (VALUES
    ('live',    idem_fingerprint('{"a": 1}'::jsonb), interval '1 hour', NULL::timestamptz, NULL::timestamptz,
                NULL::int, NULL::jsonb, NULL::bytea, NULL::jsonb),
    ('stale',   idem_fingerprint('{"a": 2}'::jsonb), interval '-1 second', NULL, NULL, NULL, NULL, NULL, NULL),
    ('json',    idem_fingerprint('{"a": 3}'::jsonb), interval '1 minute', now(), now() + interval '1 day', 201,
                '{"charge": "ch_1"}', NULL, '{"Location": "/ch_1"}'),
    ('bytes',   idem_fingerprint('\x0102'::bytea), interval '1 minute', now(), now() + interval '1 day', 200,
                NULL, '\xcafe', NULL),
    ('expired', idem_fingerprint('{"a": 5}'::jsonb), interval '1 minute', now() - interval '2 days',
                now() - interval '1 day', 200, NULL, NULL, NULL)
  ) AS v(name, fp, lease, finished, expires, status, response, bytes, headers) ON v.name = f.name;

-- The new library against the old catalog, before the update. A 0.1.0 catalog lacks columns the library
-- writes: a clear 55000 that says to update, not a missing column. A 0.2.0 catalog has the same table, so
-- its functions keep working (00000) until the update adds the paced sweep. run.sh checks which.
\set ON_ERROR_STOP 0
\set VERBOSITY terse
SELECT (idem_claim('up', 'json', '{"a": 3}'::jsonb)).outcome;
\echo sqlstate :SQLSTATE
