-- idem_keys 0.3.0 -> 0.4.0: the hot verbs (idem_claim, idem_finish, idem_lookup) lose their SET search_path
-- clause, whose GUC save and restore cost every call 4.6 % of a replay's time. The library now pins the same
-- path (pg_catalog, the extension's schema, pg_temp) around the SQL statements it runs, and finds its table
-- by OID in the extension's schema otherwise (src/catalog.rs). The other SECURITY DEFINER functions keep it.
-- It also gives scope and key the C collation, and adds idem_keys_key_hash_idx, a hash of scope || key that
-- replays, lookups and finishes read a key through instead of descending the primary key
-- (docs/benchmarks.md). Rebuilding the primary key and building the hash index hold an ACCESS EXCLUSIVE lock
-- on the table while they read it: calls wait for the upgrade (a few seconds per million keys).
-- Every change here must leave the catalog equal to a fresh 0.4.0 install (tests/upgrade checks it).
\echo Use "ALTER EXTENSION idem_keys UPDATE TO '0.4.0'" to load this file. \quit

ALTER FUNCTION @extschema@.idem_claim(text, text, jsonb, interval, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_claim(text, text, bytea, interval, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_finish(text, text, bigint, integer, jsonb, jsonb, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_finish(text, text, bigint, integer, bytea, jsonb, interval) RESET search_path;
ALTER FUNCTION @extschema@.idem_lookup(text, text) RESET search_path;

-- scope and key compare as bytes (sql/bootstrap.sql says why). Equality is the same under any deterministic
-- collation, so every key stays what it was; the table is not rewritten, its primary key is rebuilt.
ALTER TABLE @extschema@.idem_keys
    ALTER COLUMN scope TYPE text COLLATE "C",
    ALTER COLUMN key TYPE text COLLATE "C";
CREATE INDEX idem_keys_key_hash_idx ON @extschema@.idem_keys USING hash ((scope || key));
COMMENT ON INDEX @extschema@.idem_keys_key_hash_idx IS 'Hash of scope || key: how replays, lookups and finishes find a key, checking scope and key on the row.';
