-- A change to the table that the direct path would not honour (here a CHECK constraint a DBA added) sends
-- claim and finish to the SPI statements, which do: the golden output is the same with
-- idem_keys.direct_path on and off.
\set VERBOSITY terse
ALTER TABLE idem_keys ADD CONSTRAINT short_keys CHECK (length(key) <= 5);
SELECT outcome FROM idem_claim('altered', 'too-long', '{}'::jsonb);
SELECT outcome, token IS NOT NULL AS has_token FROM idem_claim('altered', 'ok', '{}'::jsonb);
SELECT idem_finish('altered', 'ok', (SELECT token FROM idem_keys WHERE scope = 'altered'), 200, '[]'::jsonb);
SELECT outcome FROM idem_claim('altered', 'ok', '{}'::jsonb);
ALTER TABLE idem_keys DROP CONSTRAINT short_keys;
SELECT outcome FROM idem_claim('altered', 'too-long', '{}'::jsonb);
\set VERBOSITY default
