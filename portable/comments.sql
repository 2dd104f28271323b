-- What differs from the extension's comments (sql/finalize.sql), and the portable edition's own objects.
COMMENT ON FUNCTION idem_stats() IS
    'Counts of in-progress, stale, finished and expired-unswept keys, age of the oldest in-progress key, the table size in bytes, and this database''s sweeps since the portable edition was installed. Revoked from PUBLIC.';
COMMENT ON FUNCTION idem_sweep_status() IS
    'This database''s sweeps since the portable edition was installed (pg_cron or manual): when the last finished and what it removed, totals, longest batch. sweep_errors is 0: a failed pg_cron run is in cron.job_run_details. Revoked from PUBLIC.';
COMMENT ON FUNCTION idem_fingerprint(jsonb) IS
    'SHA-256 of a jsonb request in canonical form: equal jsonb values give equal fingerprints, byte for byte those of the extension.';
COMMENT ON FUNCTION idem_keys_parse_setting(text, text, text, bigint, bigint) IS
    'An idem_keys.* integer setting''s value in its base unit, parsed as PostgreSQL parses one; 22023 when malformed or out of bounds.';
COMMENT ON FUNCTION idem_keys_setting(text) IS
    'A caller-settable idem_keys.* setting (lease, retention, abandon_after, sweep_batch_size, sweep_delay) in its base unit, or its default.';
COMMENT ON FUNCTION idem_keys_protected(text) IS
    'A protected setting as the owner configured it in idem_keys_settings, or its default.';
COMMENT ON FUNCTION idem_keys_max_response_bytes() IS
    'The answer size cap for this caller: the owner''s idem_keys.max_response_bytes, or a smaller one the session SET.';
COMMENT ON FUNCTION idem_keys_configure(text, text) IS
    'Set a protected setting (idem_keys.max_response_bytes, tenant_binding, tenant_setting, tenant_claim) for every caller; NULL restores the default. Returns the value now in force. Revoked from PUBLIC.';
COMMENT ON FUNCTION idem_keys_raise(text, text, text, text) IS
    'Raise an error with SQLSTATE, message, and optional detail and hint.';
COMMENT ON FUNCTION idem_keys_null_argument(text, text) IS '22004: a required argument was NULL.';
COMMENT ON FUNCTION idem_keys_bad_name(text, integer) IS '22023: a key or checkpoint name empty or over 255 characters.';
COMMENT ON FUNCTION idem_keys_unknown_key(text) IS 'P0002: no such (live) idempotency key.';
COMMENT ON FUNCTION idem_keys_token_not_owner(bigint) IS '55000: the token does not own the key (any more).';
COMMENT ON FUNCTION idem_keys_check_size(text, bigint) IS '54000 when a stored value is over the size cap.';
COMMENT ON FUNCTION idem_keys_seconds(interval) IS
    'An interval''s length in seconds as the extension counts it: a month is 30 days, a day 24 hours.';
COMMENT ON FUNCTION idem_keys_duration(text, interval) IS
    'A lease or retention as a fixed length (22023 when not positive), capped as the extension caps it.';
COMMENT ON FUNCTION idem_keys_interval(text, interval) IS
    'A lease or retention in force: the one given (22023 when not positive), else its idem_keys.* setting''s.';
COMMENT ON FUNCTION idem_keys_writable(text) IS '25006 on a hot standby.';
COMMENT ON FUNCTION idem_keys_plain_call(text, text) IS
    'Whether a keyed call passes every check of idem_keys_check_call, as one expression for the verbs'' common case.';
COMMENT ON FUNCTION idem_keys_check_call(text, text, text, boolean) IS
    'The checks every keyed verb starts with, with their errors: a primary (for writes), scope and key present and within 255 characters, key not empty, scope the caller''s tenant''s.';
COMMENT ON FUNCTION idem_keys_binding() IS
    'The owner''s idem_keys.tenant_binding (off unless configured), as the body of this function: idem_keys_configure rewrites it.';
COMMENT ON FUNCTION idem_keys_owner_cap() IS
    'The owner''s idem_keys.max_response_bytes: the default as the body of this function, or a read of idem_keys_settings once configured.';
COMMENT ON FUNCTION idem_keys_publish(text, text) IS
    'Rewrite the function of one protected setting (idem_keys_binding() or idem_keys_owner_cap()) for the value stored. Revoked from PUBLIC.';
COMMENT ON FUNCTION idem_keys_settings_written() IS
    'Trigger function: publishes each write to idem_keys_settings with idem_keys_publish().';
COMMENT ON TRIGGER idem_keys_settings_written ON idem_keys_settings IS
    'Rewrites the function of each protected setting a write changes.';
COMMENT ON TRIGGER idem_keys_settings_truncated ON idem_keys_settings IS
    'Puts the protected settings'' functions back to their defaults.';
COMMENT ON FUNCTION idem_keys_protected_default(text) IS
    'A protected setting''s value while the owner has not configured it.';
COMMENT ON FUNCTION idem_keys_check_tenant(text, text, text) IS
    'Tenant binding: 42501 unless the caller''s tenant owns the scope (the scope is the tenant, or starts with the tenant and '':'').';
COMMENT ON FUNCTION idem_keys_finish_checked(text, text, bigint, integer, jsonb, interval) IS
    'idem_finish''s checks that need no table, with their errors in the extension''s order.';
COMMENT ON FUNCTION idem_keys_jsonb_size(jsonb) IS 'A jsonb value''s binary size, as the size cap counts it.';
COMMENT ON FUNCTION idem_keys_sweep_kind(boolean, timestamptz, timestamptz, integer) IS
    'Delete one batch of expired answers (true) or abandoned claims (false); the count and the latest timestamp deleted.';
COMMENT ON FUNCTION idem_keys_sweep_batch(idem_sweep_progress, integer, boolean) IS
    'One sweep batch of both kinds from where progress says.';
COMMENT ON FUNCTION idem_keys_distributed() IS
    'Whether Citus distributes idem_keys in this database (its rows are then in shards).';
COMMENT ON FUNCTION idem_keys_sweep_shards(idem_sweep_progress, integer, boolean) IS
    'One sweep batch on a node of a Citus cluster: both kinds, over each shard of idem_keys this node holds.';
COMMENT ON FUNCTION idem_keys_record_sweep(bigint, bigint) IS 'Record a finished sweep for idem_sweep_status().';
COMMENT ON FUNCTION idem_keys_sweeps_here(text) IS 'Refuses a sweep on a Citus coordinator, which holds none of the distributed table''s rows (0A000, with what to run instead).';
COMMENT ON FUNCTION idem_keys_batch_size(integer) IS 'A sweep''s batch size: the setting when NULL, 22023 when not positive.';
COMMENT ON INDEX idem_keys_settings_pkey IS 'One value per protected setting.';
COMMENT ON INDEX idem_keys_sweep_record_pkey IS 'idem_keys_sweep_record holds one row.';
COMMENT ON INDEX idem_keys_lock_seed_pkey IS 'idem_keys_lock_seed holds one row.';
COMMENT ON FUNCTION idem_keys_body_fingerprint(bytea, boolean) IS
    'The fingerprint of idem_claim(text, text, bytea, boolean, …): the jsonb form''s where is_json and the bytes are JSON jsonb accepts, else sha256 of the bytes.';
COMMENT ON FUNCTION idem_keys_request_fingerprint(text, text, bytea, boolean) IS
    'The fingerprint of idem_claim(text, text, text, text, bytea, boolean, …), an HTTP request as the middlewares fingerprint one: of {method, target, body} where is_json and the body is JSON jsonb accepts, else sha256 of method, target and body.';
