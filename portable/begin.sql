-- Runs first. The whole file is one transaction: an install or an upgrade happens completely or not at
-- all, and two runs at once take turns.
BEGIN;
-- IF NOT EXISTS says NOTICE for each object an earlier run made: expected, so not shown.
SET LOCAL client_min_messages = warning;

DO $$
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('idem_keys portable edition'));
    IF pg_catalog.current_setting('server_version_num')::integer < 150000 THEN
        RAISE EXCEPTION 'idem_keys: the portable edition needs PostgreSQL 15 or later' USING ERRCODE = '0A000';
    END IF;
    IF pg_catalog.current_schema() IS NULL THEN
        RAISE EXCEPTION 'idem_keys: no schema to install into' USING ERRCODE = '3F000',
            DETAIL = 'No schema of search_path exists.',
            HINT = 'SET search_path to the schema to install into (e.g. public), then run this file again.';
    END IF;
    -- A schema every role may create objects in would let one plant a function or operator that the
    -- edition's functions, owned by the installer, would then run (what REVOKE CREATE ON SCHEMA public FROM
    -- PUBLIC, the default since PostgreSQL 15, prevents).
    IF pg_catalog.has_schema_privilege('public', pg_catalog.current_schema(), 'CREATE') THEN
        RAISE EXCEPTION 'idem_keys: every role may create objects in schema %', pg_catalog.current_schema()
            USING ERRCODE = '42501',
            DETAIL = 'A function or operator another role created there could run with the rights of the role installing idem_keys.',
            HINT = pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC (the default since PostgreSQL 15), or install into a schema of its own.',
                                     pg_catalog.current_schema());
    END IF;
    -- The extension's objects in the same schema: the two editions would fight over one table.
    IF EXISTS (SELECT FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_class AS c ON c.oid = d.objid AND d.classid = 'pg_catalog.pg_class'::regclass
                WHERE d.deptype = 'e' AND c.relname = 'idem_keys'
                  AND c.relnamespace = pg_catalog.current_schema()::regnamespace) THEN
        RAISE EXCEPTION 'idem_keys: the idem_keys extension is installed in schema %', pg_catalog.current_schema()
            USING ERRCODE = '42710',
            HINT = 'Use the extension, or install the portable edition into another schema (SET search_path first).';
    END IF;
END
$$;

-- Everything below is created in the current schema and found there; pg_catalog and pg_temp come after it
-- only while installing (the SECURITY DEFINER functions get pg_catalog, <schema>, pg_temp at the end).
DO $$
BEGIN
    PERFORM pg_catalog.set_config('search_path',
        pg_catalog.format('%I, pg_catalog, pg_temp', pg_catalog.current_schema()), true);
END
$$;
