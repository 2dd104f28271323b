-- Changes a DBA may make to idem_keys that the direct path must not write through (src/direct/table.rs,
-- `Decline`). Under each one, claim, lookup and finish give the SPI statements' answers, errors included: the
-- regress stage runs this file with idem_keys.direct_path on and off against the same golden output. Which
-- changes decline is asserted in src/tests/mod.rs (direct_path_declines_exactly_what_it_would_not_honour).
\set VERBOSITY sqlstate
CREATE ROLE regress_idem_other;
-- One key's life: claim, a retry while in progress (with its checkpoint), a mismatch, finish, a replay,
-- and a finish by a token that does not own the key.
CREATE FUNCTION pg_temp.cycle(s text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  r idem_result;
  seen text;
BEGIN
  r := idem_claim(s, 'k', '{"a": 1}'::jsonb);
  seen := r.outcome;
  seen := seen || ' ' || (SELECT outcome || '/' || coalesce(checkpoint, '-') FROM idem_claim(s, 'k', '{"a": 1}'::jsonb));
  seen := seen || ' ' || (idem_claim(s, 'k', '{"a": 2}'::jsonb)).outcome;
  seen := seen || ' lookup:' || (SELECT outcome || '/' || coalesce(checkpoint, '-') FROM idem_lookup(s, 'k'));
  PERFORM idem_finish(s, 'k', r.token, 201, '{"id": 1}'::jsonb);
  seen := seen || ' ' || (SELECT outcome || '/' || status_code || '/' || response::text FROM idem_claim(s, 'k', '{"a": 1}'::jsonb));
  seen := seen || ' lookup:' || (SELECT outcome || '/' || status_code || '/' || response::text FROM idem_lookup(s, 'k'));
  BEGIN
    PERFORM idem_finish(s, 'k', r.token + 1000, 200, '{}'::jsonb);
  EXCEPTION WHEN OTHERS THEN
    seen := seen || ' other-token:' || SQLSTATE;
  END;
  RETURN seen;
END $$;
-- The table as sql/ creates it.
SELECT pg_temp.cycle('plain');
-- 1. A second unique index on (scope, key), as a DBA builds to replace a bloated primary key: an arbiter too.
BEGIN;
CREATE UNIQUE INDEX idem_copy ON idem_keys (scope, key);
SELECT pg_temp.cycle('copy');
ROLLBACK;
BEGIN;
CREATE UNIQUE INDEX idem_swapped ON idem_keys (key, scope);
SELECT pg_temp.cycle('swapped');
ROLLBACK;
-- 2. A redefined primary key: with no unique index on exactly (scope, key), ON CONFLICT has no arbiter.
BEGIN;
ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD PRIMARY KEY (scope, key, token);
SELECT pg_temp.cycle('wide_pkey');
ROLLBACK;
BEGIN;
ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD PRIMARY KEY (token), ADD UNIQUE (scope, key);
SELECT pg_temp.cycle('token_pkey');
ROLLBACK;
BEGIN;
ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey,
  ADD CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key) DEFERRABLE INITIALLY DEFERRED;
SELECT pg_temp.cycle('deferred');
ROLLBACK;
-- 3. Column defaults, identity columns, inheritance children.
BEGIN;
ALTER TABLE idem_keys ALTER checkpoint SET DEFAULT 'from-default';
SELECT pg_temp.cycle('default');
ROLLBACK;
BEGIN;
ALTER TABLE idem_keys ALTER token ADD GENERATED ALWAYS AS IDENTITY;
SELECT pg_temp.cycle('identity');
ROLLBACK;
BEGIN;
CREATE TABLE idem_child () INHERITS (idem_keys);
INSERT INTO idem_child SELECT * FROM idem_keys WHERE scope = 'plain';
UPDATE idem_child SET scope = 'inherited', finished_at = NULL, expires_at = NULL, token = 1;
SELECT pg_temp.cycle('inherited');
SELECT count(*) AS child_rows_finished FROM ONLY idem_child WHERE finished_at IS NOT NULL;
ROLLBACK;
-- 4. Row security and ownership.
BEGIN;
ALTER TABLE idem_keys ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
SELECT pg_temp.cycle('forced_rls');
ROLLBACK;
BEGIN;
ALTER TABLE idem_keys ENABLE ROW LEVEL SECURITY, OWNER TO regress_idem_other;
SELECT pg_temp.cycle('other_owner');
ROLLBACK;
DELETE FROM idem_keys WHERE scope = 'plain';
DROP ROLE regress_idem_other;
