-- The direct path caches the table's and the sequence's OIDs per backend and forgets them on a relcache
-- invalidation. After DROP and CREATE EXTENSION in the same session, the first call must use the new table
-- directly: a replay on the direct path draws no token, a fallback to SPI would draw one.
SET idem_keys.direct_path = on;
SELECT outcome FROM idem_claim('reinstall', 'k', '{}'::jsonb);
DROP EXTENSION idem_keys;
CREATE EXTENSION idem_keys;
-- A finished key written behind the functions' back, so that the first call after the reinstall is a replay.
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at,
                       finished_at, expires_at, status_code, response)
VALUES ('reinstall', 'k', idem_fingerprint('{}'::jsonb), 7, 1, now(), now(), now() + interval '1 minute',
        now(), now() + interval '1 day', 200, '{"ok": true}');
SELECT outcome, token, response FROM idem_claim('reinstall', 'k', '{}'::jsonb);
SELECT is_called AS token_drawn FROM idem_keys_token_seq;
RESET idem_keys.direct_path;
