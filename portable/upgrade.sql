-- Brings an older install up to this version's shape, keeping every key and the token sequence. Runs before
-- the extension's bootstrap.sql, which then creates what is still missing (IF NOT EXISTS); a fresh install
-- passes through it unchanged.
DO $$
DECLARE
    wanted record;
    constraint_name name;
    old regprocedure;
    same_version boolean;
    dropped boolean;
BEGIN
    -- Functions: the same version's file replaces them in place (CREATE OR REPLACE keeps their grants). From
    -- another version, whose signatures and result types may differ, they are dropped and made anew; the
    -- EXECUTE grants an administrator gave, and revokes from PUBLIC, are kept here and given back at the end
    -- (seal.sql).
    CREATE TEMP TABLE idem_keys_saved_grants (signature text, grantee oid) ON COMMIT DROP;
    IF pg_catalog.to_regprocedure('idem_keys_portable_version()') IS NULL THEN
        same_version := false;
    ELSE
        same_version := idem_keys_portable_version() = '@VERSION@';
    END IF;
    IF NOT same_version THEN
        INSERT INTO idem_keys_saved_grants
        SELECT p.oid::regprocedure::text, a.grantee
          FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
         WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace AND p.proname = ANY (@FUNCTION_NAMES@)
           AND a.grantee NOT IN (0, p.proowner);
        -- And what was revoked from PUBLIC (grantee 0 here), so that a verb an administrator closed stays closed.
        INSERT INTO idem_keys_saved_grants
        SELECT p.oid::regprocedure::text, 0
          FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace AND p.proname = ANY (@FUNCTION_NAMES@)
           AND NOT pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE');
        -- Our own triggers use our functions: settings.sql makes them again.
        IF pg_catalog.to_regclass('idem_keys_settings') IS NOT NULL THEN
            DROP TRIGGER IF EXISTS idem_keys_settings_written ON idem_keys_settings;
            DROP TRIGGER IF EXISTS idem_keys_settings_truncated ON idem_keys_settings;
        END IF;
        -- In passes: the SQL-bodied ones depend on each other. What something else depends on (a view or a
        -- function of the application) cannot be replaced safely: then the upgrade stops, changing nothing.
        dropped := true;
        WHILE dropped LOOP
            dropped := false;
            FOR old IN
                SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
                 WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace AND p.proname = ANY (@FUNCTION_NAMES@)
            LOOP
                BEGIN
                    EXECUTE pg_catalog.format('DROP ROUTINE %s', old);
                    dropped := true;
                EXCEPTION WHEN dependent_objects_still_exist THEN
                    NULL; -- a later pass
                END;
            END LOOP;
        END LOOP;
        IF EXISTS (SELECT FROM pg_catalog.pg_proc AS p
                    WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace AND p.proname = ANY (@FUNCTION_NAMES@)) THEN
            RAISE EXCEPTION 'idem_keys: cannot upgrade: other objects depend on its functions' USING ERRCODE = '2BP01',
                DETAIL = (SELECT 'Still in use: ' || pg_catalog.string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1)
                            FROM pg_catalog.pg_proc AS p
                           WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace
                             AND p.proname = ANY (@FUNCTION_NAMES@)),
                HINT = 'Drop the views or functions that call them, run this file, then create those again. Nothing was changed.';
        END IF;
    END IF;
    -- Helpers an earlier file had and this one has not (scripts/portable.py RETIRED_FUNCTIONS): gone with the
    -- rest from another version; from a file of the same version made before they went, dropped here.
    FOR old IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = pg_catalog.current_schema()::regnamespace AND p.proname = ANY (@RETIRED_FUNCTIONS@)
    LOOP
        EXECUTE pg_catalog.format('DROP ROUTINE %s', old);
    END LOOP;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_class AS c
                    WHERE c.relname = 'idem_keys' AND c.relnamespace = pg_catalog.current_schema()::regnamespace) THEN
        RETURN; -- a fresh install
    END IF;
    -- Columns added since the first shape (0.1.0): the recovery point.
    ALTER TABLE idem_keys ADD COLUMN IF NOT EXISTS checkpoint text, ADD COLUMN IF NOT EXISTS checkpoint_state jsonb;
    -- The first shape checked row invariants in CHECK constraints; the functions keep them now (bootstrap.sql
    -- says why).
    FOR constraint_name IN
        SELECT c.conname FROM pg_catalog.pg_constraint AS c
         WHERE c.conrelid = 'idem_keys'::regclass AND c.contype = 'c'
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE idem_keys DROP CONSTRAINT %I', constraint_name);
    END LOOP;
    -- Keys compare bytes (COLLATE "C"); the first shape used the database's collation.
    IF EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
                WHERE a.attrelid = 'idem_keys'::regclass AND a.attname IN ('scope', 'key')
                  AND a.attcollation <> 'pg_catalog."C"'::regcollation) THEN
        ALTER TABLE idem_keys ALTER COLUMN scope TYPE text COLLATE "C", ALTER COLUMN key TYPE text COLLATE "C";
    END IF;
    -- idem_result's fields added since the first shape, in order.
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_type AS t
                    WHERE t.typname = 'idem_result' AND t.typnamespace = pg_catalog.current_schema()::regnamespace) THEN
        RETURN;
    END IF;
    FOR wanted IN
        SELECT * FROM (VALUES (1, 'retry_after', 'integer'), (2, 'created_at', 'timestamptz'),
                              (3, 'checkpoint', 'text'), (4, 'checkpoint_state', 'jsonb')) AS w(n, name, type)
         WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_attribute AS a
                            WHERE a.attrelid = (SELECT t.typrelid FROM pg_catalog.pg_type AS t
                                                 WHERE t.oid = 'idem_result'::regtype)
                              AND a.attname = w.name AND NOT a.attisdropped)
         ORDER BY w.n
    LOOP
        EXECUTE pg_catalog.format('ALTER TYPE idem_result ADD ATTRIBUTE %I %s', wanted.name, wanted.type::regtype);
    END LOOP;
END
$$;
