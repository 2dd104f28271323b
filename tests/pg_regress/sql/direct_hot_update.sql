-- A finish that PostgreSQL 16+ does as a HOT update still owes summarizing (BRIN) indexes an entry for the
-- new row version, and owes the other indexes none (`onlySummarizing`, src/compat.rs). With the sweep's
-- partial indexes gone and a BRIN index on expires_at, a finish changes no column a btree covers: on 16+
-- the primary key gains no entry (HOT); on 15, where any index on a changed column rules HOT out, it gains
-- one. Both paths (idem_keys.direct_path on and off) answer the same.
BEGIN;
-- The finish must update a written claim: not the write-once claim of a transaction block, which the finish
-- inserts finished.
SET LOCAL idem_keys.write_once = off;
-- Room on the row's page for its second version, so the update can be HOT.
ALTER TABLE idem_keys SET (fillfactor = 50);
DROP INDEX idem_keys_expires_at_idx, idem_keys_lease_ends_at_idx;
CREATE INDEX idem_keys_expires_brin ON idem_keys USING brin (expires_at);
-- The primary key's entries, counted in its file after a CHECKPOINT (pageinspect is contrib, which some
-- builds lack): each page past the metapage ends its array of 4-byte line pointers, which starts after the
-- 24-byte header, at pd_lower (bytes 12-13, little-endian here).
CREATE FUNCTION pg_temp.pkey_entries() RETURNS bigint LANGUAGE sql AS $$
  SELECT sum((get_byte(header, 12) + 256 * get_byte(header, 13) - 24) / 4)
    FROM generate_series(1, (pg_relation_size('idem_keys_pkey') / 8192)::int - 1) AS page,
         pg_read_binary_file(pg_relation_filepath('idem_keys_pkey'), page * 8192::bigint, 14) AS header
$$;
SELECT outcome FROM idem_claim('hot', 'k', '{}'::jsonb);
CHECKPOINT;
SELECT pg_temp.pkey_entries() AS entries_before \gset
SELECT idem_finish('hot', 'k', (SELECT token FROM idem_keys WHERE scope = 'hot'), 200, '{"ok": true}'::jsonb);
CHECKPOINT;
SELECT pg_temp.pkey_entries() - :entries_before
         = CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 0 ELSE 1 END
       AS primary_key_entries_as_expected;
-- The new version is what a retry finds through the primary key.
SELECT outcome, status_code, response FROM idem_claim('hot', 'k', '{}'::jsonb);
ROLLBACK;
