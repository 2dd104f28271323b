-- idem_claim in PL/pgSQL: the statements of the extension's SPI path (src/store.rs), the same decisions
-- (src/api/claim.rs). Under READ COMMITTED every statement of a VOLATILE function takes a new snapshot, so the
-- read that follows a conflicting insert sees the row the insert waited for, as the extension's Reread does.

-- idem_claim, both overloads: the body is written once, here, and scripts/portable.py writes it out for each
-- request type (@REQUEST@), with that type's fingerprint (@FINGERPRINT@). One PL/pgSQL function per call, not
-- a SECURITY DEFINER wrapper around a shared helper: the second call cost 8-12 µs of a claim's 160
-- (docs/benchmarks.md). The checks (one expression for the common case; the ordered checks with their errors
-- when it fails), then the claim.

-- The key lock's seed: a random value only this edition's functions (SECURITY DEFINER) can read, so no other
-- role can compute a key's lock and take it to pin that key at in_progress. Drawn once, at install.
CREATE TABLE IF NOT EXISTS idem_keys_lock_seed (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    seed     bigint NOT NULL
);
REVOKE ALL ON TABLE idem_keys_lock_seed FROM PUBLIC;
COMMENT ON TABLE idem_keys_lock_seed IS
    'idem_keys portable edition: the seed of the key locks'' hash, readable only by the edition''s functions, so that no other role can take a key''s lock and pin it.';
INSERT INTO idem_keys_lock_seed (seed)
SELECT (random() * 9007199254740991)::bigint # ((random() * 9007199254740991)::bigint << 11)
 WHERE NOT EXISTS (SELECT FROM idem_keys_lock_seed);
-- The body forms' REQUEST also declares is_json, and the HTTP form's BEFORE its method and target; NULL_ARGS,
-- CHECK_BEFORE and CHECK_ARGS check them in the extension's order.
-- @overloads [{"BEFORE": "", "REQUEST": "jsonb", "FINGERPRINT": "idem_fingerprint(request)", "NULL_ARGS": "", "CHECK_BEFORE": "", "CHECK_ARGS": ""}, {"BEFORE": "", "REQUEST": "bytea", "FINGERPRINT": "sha256(request)", "NULL_ARGS": "", "CHECK_BEFORE": "", "CHECK_ARGS": ""}, {"BEFORE": "", "REQUEST": "bytea, is_json boolean", "FINGERPRINT": "idem_keys_body_fingerprint(request, is_json)", "NULL_ARGS": " OR is_json IS NULL", "CHECK_BEFORE": "", "CHECK_ARGS": "\n        IF is_json IS NULL THEN\n            PERFORM idem_keys_null_argument('idem_claim', 'is_json');\n        END IF;"}, {"BEFORE": "method text, target text, ", "REQUEST": "bytea, is_json boolean", "FINGERPRINT": "idem_keys_request_fingerprint(method, target, request, is_json)", "NULL_ARGS": " OR method IS NULL OR target IS NULL OR is_json IS NULL", "CHECK_BEFORE": "\n        IF method IS NULL THEN\n            PERFORM idem_keys_null_argument('idem_claim', 'method');\n        END IF;\n        IF target IS NULL THEN\n            PERFORM idem_keys_null_argument('idem_claim', 'target');\n        END IF;", "CHECK_ARGS": "\n        IF is_json IS NULL THEN\n            PERFORM idem_keys_null_argument('idem_claim', 'is_json');\n        END IF;"}]
CREATE OR REPLACE FUNCTION idem_claim(
    scope text, key text, @BEFORE@request @REQUEST@, lease interval DEFAULT NULL, wait interval DEFAULT '0')
RETURNS idem_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path FROM CURRENT
AS $$
DECLARE
    request_fingerprint bytea := @FINGERPRINT@;
    now timestamptz;
    deadline timestamptz;
    lease_ends timestamptz;
    poll interval := interval '10 milliseconds';
    waits boolean;
    stmt text := 'probe';
    new_token bigint;
    locked boolean := false;
    lock_id bigint;
    kept integer;
    k record;
BEGIN
    IF request IS NULL@NULL_ARGS@ OR NOT idem_keys_plain_call(scope, key) THEN
        PERFORM idem_keys_check_call('idem_claim', scope, key, true);@CHECK_BEFORE@
        IF request IS NULL THEN
            PERFORM idem_keys_null_argument('idem_claim', 'request');
        END IF;@CHECK_ARGS@
    END IF;
    lease := idem_keys_interval('lease', lease);
    IF wait < interval '0' THEN
        PERFORM idem_keys_raise('22023', 'wait must not be a negative interval', NULL,
            'Pass ''0'' (or NULL) not to wait, or an interval such as ''2 seconds''.');
    END IF;
    now := clock_timestamp();
    IF wait > interval '0' THEN
        deadline := now + least(wait, interval '100000 years');
        waits := current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
    ELSE
        deadline := now;
    END IF;
    LOOP
        lease_ends := now + lease;
        -- The key lock, before any write: PL/pgSQL cannot read another transaction's uncommitted row as the
        -- extension does (src/direct/dirty.rs), so the lock is what tells a duplicate, at once, that an open
        -- transaction holds the key. Kept to the end of the transaction, however it began, for at most 32 keys
        -- per transaction, so that a statement claiming many keys never exhausts the lock table; past that, a
        -- claim only checks that no one holds it, and a duplicate of such a key waits for the writer's
        -- transaction to end (docs/failure-model.md).
        IF stmt IN ('claim', 'takeover') AND NOT locked THEN
            lock_id := pg_catalog.hashtextextended(pg_catalog.octet_length(scope)::text || ':' || scope || key,
                (SELECT s.seed FROM idem_keys_lock_seed AS s));
            kept := coalesce(nullif(pg_catalog.current_setting('idem_keys_portable.kept_key_locks', true), '')::integer, 0);
            IF kept < 32 THEN
                locked := pg_catalog.pg_try_advisory_xact_lock(lock_id);
                IF locked THEN
                    PERFORM pg_catalog.set_config('idem_keys_portable.kept_key_locks', (kept + 1)::text, true);
                END IF;
            ELSE
                locked := pg_catalog.pg_try_advisory_lock(lock_id);
                IF locked THEN
                    PERFORM pg_catalog.pg_advisory_unlock(lock_id);
                END IF;
            END IF;
            IF NOT locked THEN
                -- Its row is not visible yet: attempt and created_at unknown, retry in a second; polled within
                -- the wait like any busy key.
                IF now >= deadline OR NOT waits THEN
                    RETURN ROW('in_progress', NULL, NULL, NULL, NULL, NULL, NULL, 1, NULL, NULL, NULL)::idem_result;
                END IF;
                PERFORM pg_sleep(greatest(0.001, extract(epoch FROM least(deadline, now + poll) - clock_timestamp())));
                poll := least(poll * 2, interval '100 milliseconds');
                stmt := 'read';
                now := clock_timestamp();
                CONTINUE;
            END IF;
        END IF;
        IF stmt = 'claim' THEN
            INSERT INTO idem_keys AS i (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at)
            VALUES (scope, key, request_fingerprint, nextval('idem_keys_token_seq'), 1, now, now, lease_ends)
            ON CONFLICT ON CONSTRAINT idem_keys_pkey DO NOTHING
            RETURNING i.token INTO new_token;
            IF new_token IS NOT NULL THEN
                RETURN ROW('claimed', new_token, 1, NULL, NULL, NULL, NULL, NULL, now, NULL, NULL)::idem_result;
            END IF;
        ELSIF stmt = 'takeover' THEN
            -- Re-checked on the newest row version, so of two racing recoverers exactly one gets a row. The
            -- token is drawn first: Citus refuses a volatile function inside an UPDATE of a distributed table.
            new_token := nextval('idem_keys_token_seq');
            UPDATE idem_keys AS t SET
                token = new_token,
                attempt = CASE WHEN t.finished_at IS NULL THEN t.attempt + 1 ELSE 1 END,
                created_at = CASE WHEN t.finished_at IS NULL THEN t.created_at ELSE now END,
                fingerprint = request_fingerprint, claimed_at = now, lease_ends_at = lease_ends,
                finished_at = NULL, expires_at = NULL, status_code = NULL, response = NULL,
                response_bytes = NULL, headers = NULL,
                -- A recovering owner resumes from the dead one's last checkpoint; an expired answer starts over.
                checkpoint = CASE WHEN t.finished_at IS NULL THEN t.checkpoint END,
                checkpoint_state = CASE WHEN t.finished_at IS NULL THEN t.checkpoint_state END
             WHERE t.scope = idem_claim.scope AND t.key = idem_claim.key
               AND ((t.finished_at IS NOT NULL AND t.expires_at <= now)
                 OR (t.finished_at IS NULL AND t.lease_ends_at <= now AND t.fingerprint = request_fingerprint))
            RETURNING t.token, t.attempt, t.created_at, t.checkpoint, t.checkpoint_state INTO k;
            IF FOUND THEN
                RETURN ROW(CASE WHEN k.attempt > 1 THEN 'recovered' ELSE 'claimed' END, k.token, k.attempt,
                           NULL, NULL, NULL, NULL, NULL, k.created_at, k.checkpoint, k.checkpoint_state)::idem_result;
            END IF;
        END IF;
        -- First a read: a retry (replay, in_progress, mismatch) costs no insert attempt and no token, as in the
        -- extension's direct path. Then, after a conflict, a lost takeover or a poll, a read with a fresh snapshot.
        SELECT r.attempt, r.fingerprint = request_fingerprint AS same_request,
               r.finished_at IS NOT NULL AS finished, r.lease_ends_at, r.expires_at, r.status_code,
               r.response, r.response_bytes, r.headers, r.created_at, r.checkpoint, r.checkpoint_state
          INTO k
          FROM idem_keys AS r
         WHERE r.scope = idem_claim.scope AND r.key = idem_claim.key;
        IF NOT FOUND THEN
            stmt := 'claim'; -- a new key, or released or swept since: insert
            CONTINUE;
        END IF;
        IF k.finished THEN
            -- A finished answer past its retention counts as absent, swept or not.
            IF k.expires_at <= now THEN
                stmt := 'takeover';
                CONTINUE;
            END IF;
            IF NOT k.same_request THEN
                RETURN ROW('mismatch', NULL, k.attempt, NULL, NULL, NULL, NULL, NULL, k.created_at, NULL, NULL)::idem_result;
            END IF;
            RETURN ROW('replay', NULL, k.attempt, k.status_code, k.response, k.response_bytes, k.headers, NULL,
                       k.created_at, NULL, NULL)::idem_result;
        END IF;
        IF NOT k.same_request THEN
            RETURN ROW('mismatch', NULL, k.attempt, NULL, NULL, NULL, NULL, NULL, k.created_at, NULL, NULL)::idem_result;
        END IF;
        IF k.lease_ends_at <= now THEN
            stmt := 'takeover';
            CONTINUE;
        END IF;
        -- In progress, as the first read saw it. That read cannot tell an owner that is finishing right now:
        -- the insert's conflict check waits for it, as the extension's does, and the read after it is final.
        IF stmt = 'probe' THEN
            stmt := 'claim';
            CONTINUE;
        END IF;
        -- In progress under a live owner: answer now, or wait (under REPEATABLE READ and SERIALIZABLE the
        -- snapshot never moves, so waiting could not see the owner finish). pg_sleep holds no lock, and
        -- statement_timeout or a cancel ends it with 57014.
        IF now >= deadline OR NOT waits THEN
            RETURN ROW('in_progress', NULL, k.attempt, NULL, NULL, NULL, NULL,
                       least(greatest(1, ceil(extract(epoch FROM k.lease_ends_at - now))), 2147483647)::integer,
                       k.created_at, k.checkpoint, k.checkpoint_state)::idem_result;
        END IF;
        -- Wake at the deadline, at the lease's end (to recover the key), or at the next poll; polls read first.
        PERFORM pg_sleep(greatest(0.001, extract(epoch FROM least(deadline, k.lease_ends_at, now + poll) - clock_timestamp())));
        poll := least(poll * 2, interval '100 milliseconds');
        stmt := 'read';
        now := clock_timestamp();
    END LOOP;
END
$$;
-- @end overloads
