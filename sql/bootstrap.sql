-- idem_keys: the table, its indexes and the result type. Runs before the generated CREATE FUNCTIONs.
-- Every object goes into the schema CREATE EXTENSION picks (@extschema@, `public` by default).

-- Fencing tokens. Global and monotonic, so the owner that recovers a key always holds a larger token than
-- the owner it replaced; gaps are normal (a speculative insert that loses a race draws one, and so does a claim
-- that runs through SPI and finds an existing key).
CREATE SEQUENCE @extschema@.idem_keys_token_seq AS bigint;

CREATE TABLE @extschema@.idem_keys (
    -- COLLATE "C": a key is an opaque string, equal only to itself byte for byte, which every deterministic
    -- collation agrees on. Under C the primary key compares bytes instead of calling strcoll at every level
    -- of every descent, and a libc upgrade that changes the locale's order cannot corrupt it.
    scope          text COLLATE "C" NOT NULL,
    key            text COLLATE "C" NOT NULL,
    fingerprint    bytea       NOT NULL,
    token          bigint      NOT NULL,
    attempt        integer     NOT NULL,
    created_at     timestamptz NOT NULL,
    claimed_at     timestamptz NOT NULL,
    lease_ends_at  timestamptz NOT NULL,
    finished_at    timestamptz,
    expires_at     timestamptz,
    status_code    integer,
    response       jsonb,
    response_bytes bytea,
    headers        jsonb,
    checkpoint       text,
    checkpoint_state jsonb,
    CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key)
    -- No CHECK constraints, on purpose: PostgreSQL re-reads and re-compiles every CHECK expression for each
    -- INSERT and UPDATE statement, which cost 17% of a claim + finish cycle (perf, docs/benchmarks.md). The
    -- row invariants (key length, status range, answer iff finished) are enforced by the functions, the only
    -- writers: the table is revoked from PUBLIC.
);

-- idem_sweep's work list for expired answers; only finished rows are in it.
CREATE INDEX idem_keys_expires_at_idx ON @extschema@.idem_keys (expires_at) WHERE finished_at IS NOT NULL;
-- idem_stale's and idem_sweep's work list for claims whose lease ended; only unfinished rows are in it.
CREATE INDEX idem_keys_lease_ends_at_idx ON @extschema@.idem_keys (lease_ends_at) WHERE finished_at IS NULL;

-- How replays, lookups and finishes find a key (src/direct/table.rs): a hash of scope || key is one bucket page,
-- where the primary key's descent compares text under the collation at every level (a replay's largest own
-- cost, docs/benchmarks.md). It holds only hashes: each row it leads to is checked on scope and key. The
-- primary key stays the arbiter of the single-winner claim (hash indexes cannot be unique).
CREATE INDEX idem_keys_key_hash_idx ON @extschema@.idem_keys USING hash ((scope || key));

-- Nobody but the owner touches the table directly: applications go through the SECURITY DEFINER functions.
REVOKE ALL ON TABLE @extschema@.idem_keys FROM PUBLIC;
REVOKE ALL ON SEQUENCE @extschema@.idem_keys_token_seq FROM PUBLIC;

-- pg_dump keeps the keys and the token sequence (else a restored database could hand out a token a dead
-- owner still holds).
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_keys', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.idem_keys_token_seq', '');

CREATE TYPE @extschema@.idem_result AS (
    outcome        text,
    token          bigint,
    attempt        integer,
    status_code    integer,
    response       jsonb,
    response_bytes bytea,
    headers        jsonb,
    retry_after    integer,
    created_at     timestamptz,
    checkpoint       text,
    checkpoint_state jsonb
);

-- How far a paced sweep (CALL idem_sweep_paced()) got: the state it carries from one committed batch to the
-- next, as idem_sweep_step's argument and result.
CREATE TYPE @extschema@.idem_sweep_progress AS (
    finished_from        timestamptz,
    abandoned_from       timestamptz,
    removed              bigint,
    longest_batch_micros bigint,
    done                 boolean
);

COMMENT ON TYPE @extschema@.idem_sweep_progress IS
    'State of a paced sweep between its committed batches (idem_sweep_step): where the next batch starts, rows removed and the longest batch so far, and whether the sweep is done. NULL starts a new sweep.';

COMMENT ON SEQUENCE @extschema@.idem_keys_token_seq IS
    'idem_keys: source of fencing tokens; monotonic across takeovers.';
COMMENT ON TABLE @extschema@.idem_keys IS
    'idem_keys: one row per (scope, key): an in-progress claim or a finished, replayable answer. Use the idem_* functions, not DML.';
COMMENT ON COLUMN @extschema@.idem_keys.scope IS 'Namespace of the key (tenant, endpoint); up to 255 characters, may be empty.';
COMMENT ON COLUMN @extschema@.idem_keys.key IS 'The client''s idempotency key; 1 to 255 characters.';
COMMENT ON COLUMN @extschema@.idem_keys.fingerprint IS 'SHA-256 of the request (idem_fingerprint); a retry must match it.';
COMMENT ON COLUMN @extschema@.idem_keys.token IS 'Fencing token of the current owner; only it may finish, release or checkpoint.';
COMMENT ON COLUMN @extschema@.idem_keys.attempt IS '1 for the first owner, +1 for each recovery after a lease ran out.';
COMMENT ON COLUMN @extschema@.idem_keys.created_at IS 'When the key was first claimed.';
COMMENT ON COLUMN @extschema@.idem_keys.claimed_at IS 'When the current owner claimed or recovered it.';
COMMENT ON COLUMN @extschema@.idem_keys.lease_ends_at IS 'When the current owner''s lease ends; after it a retry may recover the key.';
COMMENT ON COLUMN @extschema@.idem_keys.finished_at IS 'When the answer was stored; NULL while in progress.';
COMMENT ON COLUMN @extschema@.idem_keys.expires_at IS 'End of retention; after it the key counts as absent.';
COMMENT ON COLUMN @extschema@.idem_keys.status_code IS 'Stored HTTP status (100-599).';
COMMENT ON COLUMN @extschema@.idem_keys.response IS 'Stored JSON response body, or NULL.';
COMMENT ON COLUMN @extschema@.idem_keys.response_bytes IS 'Stored raw response body, or NULL.';
COMMENT ON COLUMN @extschema@.idem_keys.headers IS 'Stored response headers as a JSON object, or NULL.';
COMMENT ON COLUMN @extschema@.idem_keys.checkpoint IS 'Last recovery point the owner recorded (idem_checkpoint); carried over to the owner that recovers the key.';
COMMENT ON COLUMN @extschema@.idem_keys.checkpoint_state IS 'State recorded with the last checkpoint, or NULL.';
COMMENT ON INDEX @extschema@.idem_keys_pkey IS 'One row per (scope, key): the single-winner claim relies on it.';
COMMENT ON INDEX @extschema@.idem_keys_expires_at_idx IS 'Finished keys by end of retention, for idem_sweep.';
COMMENT ON INDEX @extschema@.idem_keys_key_hash_idx IS 'Hash of scope || key: how replays, lookups and finishes find a key, checking scope and key on the row.';
COMMENT ON INDEX @extschema@.idem_keys_lease_ends_at_idx IS 'Unfinished keys by lease end, for idem_stale and idem_sweep.';
COMMENT ON TYPE @extschema@.idem_result IS
    'Result of idem_claim and idem_lookup: outcome is claimed, replay, in_progress, mismatch or recovered; token is set only for claimed and recovered; checkpoint and checkpoint_state only for recovered and in_progress.';
