-- The owner's verbs, fenced by the token (src/api/finish.rs, src/api/checkpoint.rs), and idem_lookup
-- (src/api/lookup.rs), with the extension's statements and checks in the extension's order.

-- idem_finish, both overloads: the body is written once, here, and scripts/portable.py writes it out for each
-- response type (@RESPONSE@), with that type's size (@SIZE@: a jsonb's binary size, a bytea's length) and
-- the columns it fills (@AS_JSONB@, @AS_BYTES@). One PL/pgSQL function per call, as idem_claim. The checks
-- (one expression for the common case; the ordered checks with their errors when it fails), then the answer
-- is stored if the token still owns the unfinished key, else it says why not.
-- @overloads [{"RESPONSE": "jsonb", "SIZE": "idem_keys_jsonb_size(response)", "AS_JSONB": "idem_finish.response", "AS_BYTES": "NULL::bytea"}, {"RESPONSE": "bytea", "SIZE": "octet_length(response)", "AS_JSONB": "NULL::jsonb", "AS_BYTES": "idem_finish.response"}]
CREATE OR REPLACE FUNCTION idem_finish(
    scope text, key text, token bigint, status_code integer, response @RESPONSE@, headers jsonb DEFAULT NULL,
    retention interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path FROM CURRENT
AS $$
DECLARE
    response_size bigint := @SIZE@;
    now timestamptz;
    keep interval;
    k record;
BEGIN
    IF token IS NULL OR status_code IS NULL OR status_code NOT BETWEEN 100 AND 599
       OR jsonb_typeof(headers) <> 'object' OR idem_keys_seconds(retention) <= 0
       OR NOT idem_keys_plain_call(scope, key) THEN
        PERFORM idem_keys_finish_checked(scope, key, token, status_code, headers, retention);
    END IF;
    -- The sizes against the cap in one expression, the cap read only when there is something to measure (a
    -- caller's bad SET of it fails only then); when one is over, the checks in the extension's order: the
    -- headers' size, the retention setting's errors, then the response's size.
    IF (headers IS NOT NULL OR response_size IS NOT NULL)
       AND greatest(idem_keys_jsonb_size(headers), response_size) > idem_keys_max_response_bytes() THEN
        PERFORM idem_keys_check_size('headers', idem_keys_jsonb_size(headers));
        PERFORM idem_keys_interval('retention', retention);
        PERFORM idem_keys_check_size('response', response_size);
    END IF;
    keep := idem_keys_interval('retention', retention);
    now := clock_timestamp();
    -- With a synchronous standby, a session's synchronous_commit = off or local must not make an answer
    -- visible (and replayable) before the standby has it: this transaction commits as if it were on, as in
    -- the extension (docs/operations.md). SET LOCAL outlives this function, up to the commit.
    IF current_setting('synchronous_commit') IN ('off', 'local') AND current_setting('synchronous_standby_names') <> '' THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    UPDATE idem_keys AS f
       SET finished_at = now, expires_at = now + keep, status_code = idem_finish.status_code,
           response = @AS_JSONB@, response_bytes = @AS_BYTES@,
           headers = idem_finish.headers
     WHERE f.scope = idem_finish.scope AND f.key = idem_finish.key AND f.token = idem_finish.token
       AND f.finished_at IS NULL;
    IF FOUND THEN
        RETURN;
    END IF;
    SELECT f.token AS owner, f.finished_at IS NOT NULL AND f.expires_at <= now AS expired,
           f.status_code = idem_finish.status_code
             AND f.response IS NOT DISTINCT FROM @AS_JSONB@
             AND f.response_bytes IS NOT DISTINCT FROM @AS_BYTES@
             AND f.headers IS NOT DISTINCT FROM idem_finish.headers AS same_answer
      INTO k
      FROM idem_keys AS f
     WHERE f.scope = idem_finish.scope AND f.key = idem_finish.key;
    IF NOT FOUND OR k.expired THEN
        PERFORM idem_keys_unknown_key('idem_finish');
    END IF;
    IF k.owner <> token THEN
        PERFORM idem_keys_token_not_owner(token);
    END IF;
    -- Same token, already finished: a retried finish. Fine if it says the same thing.
    IF NOT coalesce(k.same_answer, false) THEN
        PERFORM idem_keys_raise('55000', 'idempotency key is already finished with a different answer', NULL,
            'A finished key''s answer never changes. Finishing again with the same answer is a no-op.');
    END IF;
END
$$;
-- @end overloads

-- The checks of both idem_finish overloads that need no table access, in the extension's order, with their
-- errors. The overloads call it only when their one-expression test fails.
CREATE OR REPLACE FUNCTION idem_keys_finish_checked(
    scope text, key text, token bigint, status_code integer, headers jsonb, retention interval)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    PERFORM idem_keys_check_call('idem_finish', scope, key, true);
    IF token IS NULL THEN
        PERFORM idem_keys_null_argument('idem_finish', 'token');
    END IF;
    IF status_code IS NULL THEN
        PERFORM idem_keys_null_argument('idem_finish', 'status_code');
    END IF;
    IF status_code NOT BETWEEN 100 AND 599 THEN
        PERFORM idem_keys_raise('22023', 'status_code ' || status_code || ' is not an HTTP status code', NULL,
            'status_code must be between 100 and 599.');
    END IF;
    IF jsonb_typeof(headers) <> 'object' THEN
        PERFORM idem_keys_raise('22023', 'headers must be a JSON object',
            'Got a JSON ' || CASE WHEN jsonb_typeof(headers) = 'array' THEN 'array' ELSE 'scalar' END || '.',
            'Pass e.g. ''{"Content-Type": "application/json"}''::jsonb, or NULL for none.');
    END IF;
    IF headers IS NOT NULL THEN
        PERFORM idem_keys_check_size('headers', idem_keys_jsonb_size(headers));
    END IF;
    IF retention IS NOT NULL THEN
        PERFORM idem_keys_duration('retention', retention);
    END IF;
END
$$;

-- A jsonb value's binary size without its length word: what the extension's size cap counts, which measures
-- the value decompressed. pg_column_size counts a value as it is held: compressed (an argument taken from a
-- table), or with a 1-byte length word (under 127 bytes); those are measured on a fresh copy. Not STRICT,
-- and STABLE as pg_column_size, so that it is inlined (callers pass no NULL).
CREATE OR REPLACE FUNCTION idem_keys_jsonb_size(value jsonb)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN pg_column_compression(value) IS NULL AND pg_column_size(value) > 130
            THEN pg_column_size(value) - 4
            ELSE pg_column_size(jsonb_path_query_first(value, '$')) - 4 END;

CREATE OR REPLACE FUNCTION idem_release(scope text, key text, token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF token IS NULL OR NOT idem_keys_plain_call(scope, key) THEN
        PERFORM idem_keys_check_call('idem_release', scope, key, true);
        IF token IS NULL THEN
            PERFORM idem_keys_null_argument('idem_release', 'token');
        END IF;
    END IF;
    DELETE FROM idem_keys AS d
     WHERE d.scope = idem_release.scope AND d.key = idem_release.key AND d.token = idem_release.token
       AND d.finished_at IS NULL;
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Why not: a key that is unknown, or whose answer expired, is P0002; another owner's is false.
    IF NOT EXISTS (SELECT FROM idem_keys AS o
                    WHERE o.scope = idem_release.scope AND o.key = idem_release.key
                      AND (o.finished_at IS NULL OR o.expires_at > clock_timestamp())) THEN
        PERFORM idem_keys_unknown_key('idem_release');
    END IF;
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION idem_checkpoint(scope text, key text, token bigint, point text, state jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path FROM CURRENT
AS $$
DECLARE
    live record;
BEGIN
    PERFORM idem_keys_check_call('idem_checkpoint', scope, key, true);
    IF token IS NULL THEN
        PERFORM idem_keys_null_argument('idem_checkpoint', 'token');
    END IF;
    IF point IS NULL THEN
        PERFORM idem_keys_null_argument('idem_checkpoint', 'point');
    END IF;
    IF point = '' OR (octet_length(point) > 255 AND char_length(point) > 255) THEN
        PERFORM idem_keys_bad_name('checkpoint name', char_length(point));
    END IF;
    IF state IS NOT NULL THEN
        PERFORM idem_keys_check_size('state', idem_keys_jsonb_size(state));
    END IF;
    UPDATE idem_keys AS c SET checkpoint = point, checkpoint_state = state
     WHERE c.scope = idem_checkpoint.scope AND c.key = idem_checkpoint.key AND c.token = idem_checkpoint.token
       AND c.finished_at IS NULL;
    IF FOUND THEN
        RETURN;
    END IF;
    -- Why not: the live owner's token, unless the key is unknown or its answer expired.
    SELECT o.token AS owner INTO live
      FROM idem_keys AS o
     WHERE o.scope = idem_checkpoint.scope AND o.key = idem_checkpoint.key
       AND (o.finished_at IS NULL OR o.expires_at > clock_timestamp());
    IF NOT FOUND THEN
        PERFORM idem_keys_unknown_key('idem_checkpoint');
    ELSIF live.owner <> token THEN
        PERFORM idem_keys_token_not_owner(token);
    END IF;
    -- Same token, so the key is finished (the update only skips finished keys).
    PERFORM idem_keys_raise('55000', 'idempotency key is already finished; it takes no more checkpoints', NULL,
        'Checkpoint before idem_finish; a finished key only replays its answer.');
END
$$;

-- replay with the stored answer, in_progress (retry_after 0 once the lease has ended), or NULL when the key
-- is unknown or expired. Never returns the token. STABLE and read-only: it works on a hot standby.
CREATE OR REPLACE FUNCTION idem_lookup(scope text, key text)
RETURNS idem_result
LANGUAGE plpgsql STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path FROM CURRENT
AS $$
DECLARE
    now timestamptz := clock_timestamp();
    k record;
BEGIN
    IF NOT idem_keys_plain_call(scope, key) THEN
        PERFORM idem_keys_check_call('idem_lookup', scope, key, false);
    END IF;
    SELECT l.attempt, l.finished_at IS NOT NULL AS finished, l.lease_ends_at, l.status_code, l.response,
           l.response_bytes, l.headers, l.created_at, l.checkpoint, l.checkpoint_state
      INTO k
      FROM idem_keys AS l
     WHERE l.scope = idem_lookup.scope AND l.key = idem_lookup.key
       AND (l.finished_at IS NULL OR l.expires_at > now);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF k.finished THEN
        RETURN ROW('replay', NULL, k.attempt, k.status_code, k.response, k.response_bytes, k.headers, NULL,
                   k.created_at, NULL, NULL)::idem_result;
    END IF;
    RETURN ROW('in_progress', NULL, k.attempt, NULL, NULL, NULL, NULL,
               least(greatest(0, ceil(extract(epoch FROM k.lease_ends_at - now))), 2147483647)::integer,
               k.created_at, k.checkpoint, k.checkpoint_state)::idem_result;
END
$$;
