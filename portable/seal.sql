-- Runs last: the paced sweep, the grants an upgrade kept, the pinned search_path, privileges, the version.

CREATE OR REPLACE FUNCTION idem_keys_portable_version()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN '@VERSION@';
COMMENT ON FUNCTION idem_keys_portable_version() IS 'The version of the idem_keys portable edition installed in this schema.';

-- Removes the edition and every key: one statement, for the owner (docs/portable.md).
CREATE OR REPLACE FUNCTION idem_keys_portable_uninstall()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    -- This edition's schema: the one its table is in (current_schema() is pg_catalog under the pinned path).
    schema_oid oid := (SELECT c.relnamespace FROM pg_catalog.pg_class AS c WHERE c.oid = 'idem_keys'::regclass);
    routine regprocedure;
    dropped boolean := true;
BEGIN
    -- Our triggers use our functions.
    DROP TRIGGER idem_keys_settings_written ON idem_keys_settings;
    DROP TRIGGER idem_keys_settings_truncated ON idem_keys_settings;
    -- Our SQL-bodied functions depend on each other: drop in passes, each taking what nothing depends on any
    -- more. A pass that drops nothing means something outside the edition depends on it: say what.
    WHILE dropped LOOP
        dropped := false;
        FOR routine IN
            SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
             WHERE p.pronamespace = schema_oid AND p.proname = ANY (@FUNCTION_NAMES@)
               AND p.proname <> 'idem_keys_portable_uninstall'
        LOOP
            BEGIN
                EXECUTE pg_catalog.format('DROP ROUTINE %s', routine);
                dropped := true;
            EXCEPTION WHEN dependent_objects_still_exist THEN
                NULL; -- a later pass
            END;
        END LOOP;
    END LOOP;
    DROP TABLE idem_keys, idem_keys_settings, idem_keys_sweep_record, idem_keys_lock_seed;
    DROP SEQUENCE idem_keys_token_seq;
    DROP TYPE idem_result, idem_sweep_progress;
    DROP FUNCTION idem_keys_portable_uninstall();
END
$$;
COMMENT ON FUNCTION idem_keys_portable_uninstall() IS
    'Remove the portable edition from this schema, with every key. Revoked from PUBLIC.';

DO $$
DECLARE
    schema_name name := pg_catalog.current_schema();
    grant_back record;
    routine regprocedure;
BEGIN
    FOR grant_back IN
        SELECT g.signature, g.grantee FROM idem_keys_saved_grants AS g
         WHERE pg_catalog.to_regprocedure(g.signature) IS NOT NULL
           AND EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid = g.grantee)
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON ROUTINE %s TO %I', grant_back.signature,
                                  pg_catalog.pg_get_userbyid(grant_back.grantee));
    END LOOP;
    FOR grant_back IN
        SELECT g.signature FROM idem_keys_saved_grants AS g
         WHERE g.grantee = 0 AND pg_catalog.to_regprocedure(g.signature) IS NOT NULL
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON ROUTINE %s FROM PUBLIC', grant_back.signature);
    END LOOP;
    -- The SECURITY DEFINER functions (and the owner's, which name this schema) find pg_catalog first, then
    -- this schema, then pg_temp last: a caller's own objects reach nothing inside them, as in the extension.
    FOR routine IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = schema_name::regnamespace AND p.proname = ANY (@FUNCTION_NAMES@)
           AND (p.prosecdef OR p.proconfig IS NOT NULL)
    LOOP
        EXECUTE pg_catalog.format('ALTER ROUTINE %s SET search_path = pg_catalog, %I, pg_temp', routine, schema_name);
    END LOOP;
    -- The helpers are the SECURITY DEFINER verbs' own; only these three are for everyone (the paced sweep
    -- calls the setting readers with the caller's rights, and the version is no secret).
    FOR routine IN
        SELECT p.oid::regprocedure FROM pg_catalog.pg_proc AS p
         WHERE p.pronamespace = schema_name::regnamespace AND p.proname = ANY (@FUNCTION_NAMES@)
           AND p.proname LIKE 'idem\_keys\_%'
           AND p.proname NOT IN ('idem_keys_setting', 'idem_keys_parse_setting', 'idem_keys_portable_version')
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON ROUTINE %s FROM PUBLIC', routine);
    END LOOP;
END
$$;

COMMIT;
