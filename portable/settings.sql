-- The idem_keys.* settings, without a loaded module.
--
-- Without the library, every idem_keys.* name is a placeholder that any caller may SET. That is right for the
-- settings a caller may choose for the keys it writes (lease, retention, abandon_after, sweep_batch_size,
-- sweep_delay): they are read with current_setting(…, true), with the extension's defaults, bounds and units,
-- and a bad value gets the error the extension gives when it is SET (22023), here when it is used.
-- The settings that protect the table from its callers (the answer size cap, tenant binding) cannot live in a
-- placeholder: they live in idem_keys_settings, which only the owner reads and writes, through
-- idem_keys_configure(). (Not SET clauses of the verbs: PostgreSQL lets only a superuser attach a setting it
-- does not know to a function.) A caller's SET of one of them changes nothing, except that a smaller
-- idem_keys.max_response_bytes tightens the cap for that caller's own session.

CREATE TABLE IF NOT EXISTS idem_keys_settings (
    name  text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);
REVOKE ALL ON TABLE idem_keys_settings FROM PUBLIC;
COMMENT ON TABLE idem_keys_settings IS
    'idem_keys portable edition: the protected settings (idem_keys.max_response_bytes, tenant_binding, tenant_setting, tenant_claim), which a caller''s SET cannot weaken. Change them with idem_keys_configure(); absent means the default.';

-- An integer setting's value in its base unit (s, ms, B or none), as PostgreSQL parses one: a number, an
-- optional unit, rounded to the base unit; NULL when unset. Errors as PostgreSQL gives them for the extension.
CREATE OR REPLACE FUNCTION idem_keys_parse_setting(
    name text, value text, base_unit text, min_value bigint, max_value bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    parts text[];
    factor numeric;
    amount numeric;
    units text;
    unit text;
BEGIN
    IF value IS NULL OR value = '' THEN
        RETURN NULL;
    END IF;
    units := CASE base_unit
        WHEN 's' THEN '"us", "ms", "s", "min", "h", and "d"'
        WHEN 'ms' THEN '"us", "ms", "s", "min", "h", and "d"'
        WHEN 'B' THEN '"B", "kB", "MB", "GB", and "TB"' END;
    parts := regexp_match(value, '^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$');
    -- The factor from the given unit to microseconds (time) or bytes (memory).
    factor := CASE
        WHEN parts IS NULL THEN NULL
        WHEN parts[2] = '' THEN CASE base_unit WHEN 's' THEN 1000000 WHEN 'ms' THEN 1000 ELSE 1 END
        WHEN base_unit IN ('s', 'ms') THEN CASE parts[2]
            WHEN 'us' THEN 1 WHEN 'ms' THEN 1000 WHEN 's' THEN 1000000 WHEN 'min' THEN 60000000
            WHEN 'h' THEN 3600000000 WHEN 'd' THEN 86400000000 END
        WHEN base_unit = 'B' THEN CASE parts[2]
            WHEN 'B' THEN 1 WHEN 'kB' THEN 1024 WHEN 'MB' THEN 1048576 WHEN 'GB' THEN 1073741824
            WHEN 'TB' THEN 1099511627776 END
        END;
    IF factor IS NULL THEN
        IF units IS NULL THEN
            RAISE EXCEPTION 'invalid value for parameter "%": "%"', name, value USING ERRCODE = '22023';
        END IF;
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', name, value USING ERRCODE = '22023',
            HINT = 'Valid units for this parameter are ' || units || '.';
    END IF;
    amount := round(parts[1]::numeric * factor
                    / CASE base_unit WHEN 's' THEN 1000000 WHEN 'ms' THEN 1000 ELSE 1 END);
    IF amount < min_value OR amount > max_value THEN
        unit := CASE WHEN base_unit = '' THEN '' ELSE ' ' || base_unit END;
        RAISE EXCEPTION '%', format('%s%s is outside the valid range for parameter "%s" (%s%s .. %s%s)',
                                    amount, unit, name, min_value, unit, max_value, unit)
            USING ERRCODE = '22023';
    END IF;
    RETURN amount;
END
$$;

-- A caller-settable setting's value in its base unit, or its default: the extension's names, defaults and
-- bounds (src/guc.rs).
CREATE OR REPLACE FUNCTION idem_keys_setting(name text)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN coalesce(
    -- Unset (where no library defines it, the usual case): the default, without the PL/pgSQL parse.
    CASE WHEN coalesce(current_setting(name, true), '') <> '' THEN CASE name
        WHEN 'idem_keys.lease' THEN idem_keys_parse_setting(name, current_setting(name, true), 's', 1, 2147483647)
        WHEN 'idem_keys.retention' THEN idem_keys_parse_setting(name, current_setting(name, true), 's', 1, 2147483647)
        WHEN 'idem_keys.abandon_after' THEN idem_keys_parse_setting(name, current_setting(name, true), 's', 1, 2147483647)
        WHEN 'idem_keys.sweep_batch_size' THEN idem_keys_parse_setting(name, current_setting(name, true), '', 1, 1000000)
        WHEN 'idem_keys.sweep_delay' THEN idem_keys_parse_setting(name, current_setting(name, true), 'ms', 0, 10000)
    END END,
    CASE name
        WHEN 'idem_keys.lease' THEN 300
        WHEN 'idem_keys.retention' THEN 86400
        WHEN 'idem_keys.abandon_after' THEN 604800
        WHEN 'idem_keys.sweep_batch_size' THEN 200
        WHEN 'idem_keys.sweep_delay' THEN 2
    END);

-- A protected setting's value while the owner has not configured it.
CREATE OR REPLACE FUNCTION idem_keys_protected_default(name text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE name
    WHEN 'idem_keys.max_response_bytes' THEN '1048576'
    WHEN 'idem_keys.tenant_binding' THEN 'off'
    WHEN 'idem_keys.tenant_setting' THEN 'app.tenant'
    WHEN 'idem_keys.tenant_claim' THEN 'sub'
END;

-- A protected setting's value as the owner configured it, or its default. PL/pgSQL, so that its query is
-- planned once per session (a SQL function with a sub-select is never inlined, and is planned per call).
CREATE OR REPLACE FUNCTION idem_keys_protected(name text)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN coalesce((SELECT s.value FROM idem_keys_settings AS s WHERE s.name = idem_keys_protected.name),
                    idem_keys_protected_default(name));
END
$$;

-- The two protected settings every keyed call reads, kept where reading them costs nothing while they hold
-- their defaults or a fixed value: SQL functions whose body is the value, which PostgreSQL inlines into the
-- verbs' plans as constants (a read of idem_keys_settings is a query per call, the largest cost of the checks).
-- A trigger on idem_keys_settings rewrites the function of each setting a write changes, from the value written,
-- in that write's transaction, however the table is written (idem_keys_configure, the owner's own UPDATE, a
-- data-only restore). Replacing a function invalidates every plan that inlined it, so each session uses the new
-- value from its next transaction. A caller cannot forge them: only the owner may write the table or replace a
-- function, and the verbs' search_path is pinned. The install makes both the defaults, then publishes what the
-- table holds.

-- The owner's tenant binding: one of four fixed bodies.
CREATE OR REPLACE FUNCTION idem_keys_binding()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN idem_keys_protected_default('idem_keys.tenant_binding');

-- The owner's answer size cap: the default, inlined; once the owner configures one, a read of the table.
CREATE OR REPLACE FUNCTION idem_keys_owner_cap()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN idem_keys_protected_default('idem_keys.max_response_bytes')::bigint;

-- Rewrites the function of one protected setting for the value now stored (NULL: none, the default). Only that
-- function, from that value, not a re-read of the table: two transactions that change two settings each
-- rewrite their own. Each body is fixed text: no value is spliced into SQL; only this schema's name is, as
-- an identifier. A binding no release knows is refused (22023), so the write that stored it fails.
CREATE OR REPLACE FUNCTION idem_keys_publish(setting text, value text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    -- On a Citus cluster each node keeps its own settings table and publishes for itself (docs/scale-out.md:
    -- the owner configures every node): Citus would refuse the redefinition on a worker, or carry the
    -- coordinator's to nodes whose table says otherwise. So its DDL propagation is off while this runs.
    -- (Not a SET clause: without Citus loaded a non-superuser may not name its setting.)
    propagation text := current_setting('citus.enable_ddl_propagation', true);
    target name := (SELECT n.nspname FROM pg_catalog.pg_proc AS p
                      JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
                     WHERE p.oid = 'idem_keys_binding()'::pg_catalog.regprocedure);
    binding text := 'CREATE OR REPLACE FUNCTION %1$I.idem_keys_binding() RETURNS text LANGUAGE sql STABLE PARALLEL SAFE ';
    cap text := 'CREATE OR REPLACE FUNCTION %1$I.idem_keys_owner_cap() RETURNS bigint STABLE PARALLEL SAFE ';
BEGIN
    IF propagation IS NOT NULL THEN
        PERFORM set_config('citus.enable_ddl_propagation', 'off', true);
    END IF;
    IF setting = 'idem_keys.tenant_binding' THEN
        CASE coalesce(value, idem_keys_protected_default(setting))
        WHEN 'off' THEN EXECUTE pg_catalog.format(binding || $b$RETURN 'off'$b$, target);
        WHEN 'role' THEN EXECUTE pg_catalog.format(binding || $b$RETURN 'role'$b$, target);
        WHEN 'setting' THEN EXECUTE pg_catalog.format(binding || $b$RETURN 'setting'$b$, target);
        WHEN 'jwt' THEN EXECUTE pg_catalog.format(binding || $b$RETURN 'jwt'$b$, target);
        ELSE
            RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting, value USING ERRCODE = '22023',
                HINT = 'Available values: off, role, setting, jwt. Change it with idem_keys_configure().';
        END CASE;
    ELSIF setting = 'idem_keys.max_response_bytes' AND value IS NULL THEN
        EXECUTE pg_catalog.format(cap || $b$LANGUAGE sql
            RETURN %1$I.idem_keys_protected_default('idem_keys.max_response_bytes')::bigint$b$, target);
    ELSIF setting = 'idem_keys.max_response_bytes' THEN
        -- PL/pgSQL, so that its query is planned once per session.
        EXECUTE pg_catalog.format(cap || $b$LANGUAGE plpgsql AS $body$
            BEGIN
                RETURN %1$I.idem_keys_protected('idem_keys.max_response_bytes')::bigint;
            END
            $body$
        $b$, target);
    END IF;
    IF propagation IS NOT NULL THEN
        PERFORM set_config('citus.enable_ddl_propagation', propagation, true);
    END IF;
END
$$;

-- The trigger that publishes every write to idem_keys_settings.
CREATE OR REPLACE FUNCTION idem_keys_settings_written()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM idem_keys_publish('idem_keys.tenant_binding', NULL);
        PERFORM idem_keys_publish('idem_keys.max_response_bytes', NULL);
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.name <> NEW.name) THEN
        PERFORM idem_keys_publish(OLD.name, NULL);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM idem_keys_publish(NEW.name, NEW.value);
    END IF;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER idem_keys_settings_written
    AFTER INSERT OR UPDATE OR DELETE ON idem_keys_settings
    FOR EACH ROW EXECUTE FUNCTION idem_keys_settings_written();
CREATE OR REPLACE TRIGGER idem_keys_settings_truncated
    AFTER TRUNCATE ON idem_keys_settings
    FOR EACH STATEMENT EXECUTE FUNCTION idem_keys_settings_written();
DO $$
BEGIN
    PERFORM idem_keys_publish(published.name,
                              (SELECT s.value FROM idem_keys_settings AS s WHERE s.name = published.name))
       FROM (VALUES ('idem_keys.tenant_binding'), ('idem_keys.max_response_bytes')) AS published(name);
END
$$;

-- The answer size cap in force for this caller: the owner's, or a smaller one the caller SET for itself.
CREATE OR REPLACE FUNCTION idem_keys_max_response_bytes()
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE
    WHEN coalesce(current_setting('idem_keys.max_response_bytes', true), '') = ''
    THEN idem_keys_owner_cap()
    ELSE least(idem_keys_owner_cap(),
               idem_keys_parse_setting('idem_keys.max_response_bytes',
                                       current_setting('idem_keys.max_response_bytes', true), 'B', 1, 2147483647))
END;

-- The owner's way to change a protected setting (NULL: back to the default), checked as the extension
-- checks it. Revoked from PUBLIC.
CREATE OR REPLACE FUNCTION idem_keys_configure(setting text, value text)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    normal text := value;
BEGIN
    IF setting IS NULL THEN
        RAISE EXCEPTION 'idem_keys_configure: setting must not be NULL' USING ERRCODE = '22004',
            HINT = 'Name one of idem_keys.max_response_bytes, idem_keys.tenant_binding, idem_keys.tenant_setting, idem_keys.tenant_claim.';
    END IF;
    IF value IS NOT NULL THEN
        CASE setting
        WHEN 'idem_keys.max_response_bytes' THEN
            normal := idem_keys_parse_setting(setting, value, 'B', 1, 2147483647)::text;
        WHEN 'idem_keys.tenant_binding' THEN
            IF value NOT IN ('off', 'role', 'setting', 'jwt') THEN
                RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting, value USING ERRCODE = '22023',
                    HINT = 'Available values: off, role, setting, jwt.';
            END IF;
        WHEN 'idem_keys.tenant_setting' THEN
            IF value !~ '^[A-Za-z0-9_][A-Za-z0-9_.]*$' OR value ~ '\.$' OR value LIKE 'idem\_keys.%'
               OR octet_length(value) > 128 THEN
                RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting, value USING ERRCODE = '22023',
                    DETAIL = 'A setting name such as app.tenant: letters, digits, "_" and ".", not one of idem_keys'' own.';
            END IF;
        WHEN 'idem_keys.tenant_claim' THEN
            IF value = '' OR octet_length(value) > 255 OR '' = ANY (string_to_array(value, '.')) THEN
                RAISE EXCEPTION 'invalid value for parameter "%": "%"', setting, value USING ERRCODE = '22023',
                    DETAIL = 'A claim name such as sub, or a dotted path such as app_metadata.tenant_id.';
            END IF;
        WHEN 'idem_keys.lease', 'idem_keys.retention', 'idem_keys.abandon_after', 'idem_keys.sweep_batch_size',
             'idem_keys.sweep_delay' THEN
            RAISE EXCEPTION 'idem_keys_configure: % is not a protected setting', setting USING ERRCODE = '22023',
                HINT = 'Every caller may choose it: SET it, or ALTER ROLE … SET / ALTER DATABASE … SET it as a default.';
        ELSE
            RAISE EXCEPTION 'unrecognized configuration parameter "%"', setting USING ERRCODE = '42704',
                HINT = 'idem_keys_configure sets idem_keys.max_response_bytes, idem_keys.tenant_binding, idem_keys.tenant_setting and idem_keys.tenant_claim.';
        END CASE;
    ELSIF setting NOT IN ('idem_keys.max_response_bytes', 'idem_keys.tenant_binding', 'idem_keys.tenant_setting',
                          'idem_keys.tenant_claim') THEN
        RAISE EXCEPTION 'unrecognized configuration parameter "%"', setting USING ERRCODE = '42704';
    END IF;
    IF normal IS NULL THEN
        DELETE FROM idem_keys_settings AS s WHERE s.name = setting;
    ELSE
        INSERT INTO idem_keys_settings AS s (name, value) VALUES (setting, normal)
            ON CONFLICT (name) DO UPDATE SET value = excluded.value;
    END IF;
    RETURN idem_keys_protected(setting);
END
$$;
