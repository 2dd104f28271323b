-- Every error the verbs raise, with the extension's SQLSTATE, message, detail and hint (src/error.rs), so a
-- client cannot tell the editions apart by their errors. Each is raised before anything is written.

CREATE OR REPLACE FUNCTION idem_keys_raise(sqlstate text, message text, detail text, hint text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    -- RAISE refuses a NULL option, and an empty one would print an empty DETAIL line.
    IF detail IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, HINT = hint;
    END IF;
    RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail, HINT = hint;
END
$$;

-- 22004: a required argument was NULL.
CREATE OR REPLACE FUNCTION idem_keys_null_argument(function text, argument text)
RETURNS void
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN idem_keys_raise('22004', function || ': ' || argument || ' must not be NULL', NULL,
    CASE argument
        WHEN 'key' THEN 'A request without an Idempotency-Key is the application''s 400; do not claim it.'
        WHEN 'token' THEN 'Pass the token that idem_claim returned with outcome claimed or recovered.'
        WHEN 'point' THEN 'Name the step the request has reached, e.g. ''charged''.'
        ELSE 'Only response, headers, state, lease, wait, retention and batch_size may be NULL.'
    END);

-- 22023: a key (what = 'idempotency key') or checkpoint name that is empty or longer than 255 characters.
CREATE OR REPLACE FUNCTION idem_keys_bad_name(what text, chars integer)
RETURNS void
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN idem_keys_raise('22023',
    CASE WHEN chars = 0 THEN what || ' must not be empty'
         ELSE what || ' is ' || chars || ' characters long; the limit is 255' END,
    NULL,
    CASE what
        WHEN 'idempotency key' THEN 'Use a client-generated UUID or a similar random string of 1 to 255 characters.'
        ELSE 'Name the step the request has reached, e.g. ''charged'' or ''email_sent''.'
    END);

-- 55000 and P0002: a fenced write whose token does not own a live key (any more), or whose key is gone.
CREATE OR REPLACE FUNCTION idem_keys_unknown_key(function text)
RETURNS void
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN idem_keys_raise('P0002', function || ': no such idempotency key',
    'The key was never claimed, was released, or its retention ended.',
    'Call idem_claim first and use the token it returns.');

CREATE OR REPLACE FUNCTION idem_keys_token_not_owner(token bigint)
RETURNS void
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN idem_keys_raise('55000', 'token ' || token || ' does not own this idempotency key',
    'Another owner recovered the key after this token''s lease ran out, or the token is wrong.',
    'Do not report this attempt''s result; the new owner reconciles and answers. Choose a longer lease if this happens often.');

-- 54000: a response, headers or checkpoint state over the size cap.
CREATE OR REPLACE FUNCTION idem_keys_check_size(argument text, bytes bigint)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    cap bigint := idem_keys_max_response_bytes();
BEGIN
    IF bytes > cap THEN
        PERFORM idem_keys_raise('54000',
            argument || ' is ' || bytes || ' bytes; idem_keys.max_response_bytes is ' || cap, NULL,
            'Store a reference to the result (an id) instead of the whole body, or have an administrator raise idem_keys.max_response_bytes.');
    END IF;
END
$$;

-- An interval's length as the extension counts it (pgrx's Interval::as_micros): a month is 30 days and a day
-- 24 hours. extract(epoch) counts a year of months as 365.25 days, so the difference goes back out.
CREATE OR REPLACE FUNCTION idem_keys_seconds(value interval)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN extract(epoch FROM value) - extract(year FROM value) * 453600;

-- A lease or retention as a fixed length, capped as the extension caps it: 22023 when not positive; NULL
-- stays NULL (the caller then takes the setting's default). Adding it to a time moves by exactly that many
-- seconds, whatever the calendar and daylight saving time do.
CREATE OR REPLACE FUNCTION idem_keys_duration(argument text, value interval)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF idem_keys_seconds(value) <= 0 THEN
        PERFORM idem_keys_raise('22023', argument || ' must be a positive interval', NULL,
            'Pass NULL to use the idem_keys.* default, or an interval such as ''30 seconds''.');
    END IF;
    RETURN make_interval(secs => least(idem_keys_seconds(value), 2305843009213.693951));
END
$$;

-- A lease or retention in force: the one given (checked as above), else its idem_keys.* setting's. SQL, so
-- that idem_claim and idem_finish inline it.
CREATE OR REPLACE FUNCTION idem_keys_interval(argument text, value interval)
RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN value IS NOT NULL THEN idem_keys_duration(argument, value)
            ELSE idem_keys_setting('idem_keys.' || argument) * interval '1 second' END;

-- 25006: writes need the primary.
CREATE OR REPLACE FUNCTION idem_keys_writable(function text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        PERFORM idem_keys_raise('25006', function || ' cannot run on a hot standby',
            'This server is in recovery: it replays the primary''s keys but cannot claim, finish or sweep them.',
            'Send idem_claim, idem_finish, idem_release, idem_checkpoint and idem_sweep to the primary; idem_lookup and idem_stats work here.');
    END IF;
END
$$;

-- Whether a keyed verb's scope and key pass every check below, as one expression: the verbs test it first
-- and call idem_keys_check_call only when it fails, which then raises the right error in the right order.
-- VOLATILE because pg_is_in_recovery() is: PostgreSQL inlines a SQL function only when its body is no more
-- volatile than it says, and runs one it does not inline by planning its body on every call.
CREATE OR REPLACE FUNCTION idem_keys_plain_call(scope text, key text)
RETURNS boolean
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN scope IS NOT NULL AND key IS NOT NULL AND key <> '' AND octet_length(scope) <= 255
   AND octet_length(key) <= 255 AND NOT pg_is_in_recovery() AND idem_keys_binding() = 'off';

-- The checks every keyed verb starts with (src/args.rs scope_and_key), in the extension's order: on a hot
-- standby (writes only), scope and key present, scope at most 255 characters, key 1 to 255, and, with tenant
-- binding on, the scope the caller's tenant's (42501), last, so that a malformed call is told so whoever
-- makes it.
CREATE OR REPLACE FUNCTION idem_keys_check_call(function text, scope text, key text, writes boolean)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    binding text := idem_keys_binding();
BEGIN
    IF writes THEN
        PERFORM idem_keys_writable(function);
    END IF;
    IF scope IS NULL THEN
        PERFORM idem_keys_null_argument(function, 'scope');
    END IF;
    IF key IS NULL THEN
        PERFORM idem_keys_null_argument(function, 'key');
    END IF;
    IF octet_length(scope) > 255 AND char_length(scope) > 255 THEN
        PERFORM idem_keys_raise('22023', 'scope is ' || char_length(scope) || ' characters long; the limit is 255',
            NULL, 'A scope names a tenant or an endpoint, e.g. ''acct_42:POST /payments''.');
    END IF;
    IF key = '' THEN
        PERFORM idem_keys_bad_name('idempotency key', 0);
    END IF;
    IF octet_length(key) > 255 AND char_length(key) > 255 THEN
        PERFORM idem_keys_bad_name('idempotency key', char_length(key));
    END IF;
    IF binding <> 'off' THEN
        PERFORM idem_keys_check_tenant(function, scope, binding);
    END IF;
END
$$;

-- Tenant binding (docs/api.md), with the owner's settings: tenant T owns the scope T and every scope that starts with 'T:'. The caller
-- is the login or SET ROLE identity, which a SECURITY DEFINER function does not change (the extension's
-- GetOuterUserId): the role setting while SET ROLE is in force, else session_user. Superusers and BYPASSRLS
-- roles are not bound.
CREATE OR REPLACE FUNCTION idem_keys_check_tenant(function text, scope text, binding text)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    caller name := CASE WHEN current_setting('role') = 'none' THEN session_user
                        ELSE current_setting('role')::name END;
    tenant text;
    missing text;
    claims jsonb;
    claims_text text;
    path text;
    value jsonb;
    member text;
BEGIN
    IF (SELECT r.rolbypassrls OR r.rolsuper FROM pg_roles AS r WHERE r.rolname = caller) THEN
        RETURN;
    END IF;
    IF binding = 'role' THEN
        tenant := caller;
    ELSIF binding = 'setting' THEN
        tenant := current_setting(idem_keys_protected('idem_keys.tenant_setting'), true);
        IF tenant IS NULL THEN
            missing := 'The setting ' || idem_keys_protected('idem_keys.tenant_setting') || ' is not set.';
        END IF;
    ELSE
        path := idem_keys_protected('idem_keys.tenant_claim');
        claims_text := current_setting('request.jwt.claims', true);
        IF claims_text IS NULL OR claims_text = '' THEN
            missing := 'The setting request.jwt.claims is not set.';
        ELSE
            -- Parsed without a subtransaction where PostgreSQL can (16 and later): idem_lookup may run in a
            -- parallel worker, which cannot start one.
            IF current_setting('server_version_num')::integer >= 160000 THEN
                IF pg_input_is_valid(claims_text, 'jsonb') THEN
                    claims := claims_text::jsonb;
                END IF;
            ELSE
                BEGIN
                    claims := claims_text::jsonb;
                EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
                    claims := NULL;
                END;
            END IF;
            -- The claim at the dotted path, through objects only (as the extension reads it: no array index).
            value := claims;
            FOREACH member IN ARRAY string_to_array(path, '.') LOOP
                IF jsonb_typeof(value) IS DISTINCT FROM 'object' THEN
                    value := NULL;
                    EXIT;
                END IF;
                value := value -> member;
            END LOOP;
            IF claims IS NULL OR jsonb_typeof(claims) <> 'object' THEN
                missing := 'request.jwt.claims is not a JSON object.';
            ELSIF jsonb_typeof(value) IN ('string', 'number') THEN
                tenant := value #>> '{}';
            ELSE
                missing := 'request.jwt.claims has no string or number claim ' || path || '.';
            END IF;
        END IF;
    END IF;
    IF missing IS NULL AND tenant = '' THEN
        missing := 'The caller''s tenant is empty.';
    ELSIF missing IS NULL AND strpos(tenant, ':') > 0 THEN
        missing := 'The caller''s tenant contains ":", which separates a tenant from the rest of a scope.';
    END IF;
    IF missing IS NOT NULL THEN
        PERFORM idem_keys_raise('42501', function || ': permission denied: the caller has no tenant',
            'idem_keys.tenant_binding is ' || binding || '. ' || missing,
            CASE binding
                WHEN 'setting' THEN 'Set the tenant for the request (SET LOCAL, or set_config(…, true)) before calling idem_keys, in the setting idem_keys.tenant_setting names.'
                WHEN 'jwt' THEN 'Call through an API layer that puts the verified token''s claims in request.jwt.claims (PostgREST does), with the claim idem_keys.tenant_claim names.'
                ELSE 'Connect or SET ROLE as the tenant''s role.'
            END);
    END IF;
    IF scope <> tenant AND left(scope, length(tenant) + 1) <> tenant || ':' THEN
        PERFORM idem_keys_raise('42501', function || ': permission denied for scope "' || scope || '"',
            'Tenant binding is on and the caller''s tenant is "' || tenant || '": it may use the scope "' || tenant
                || '" and scopes that start with "' || tenant || ':".',
            'Put the caller''s tenant first in the scope, e.g. ''acme:POST /payments'' for tenant acme.');
    END IF;
END
$$;
