//! Tests that need a server. `cargo pgrx test` runs all of them against a throwaway PostgreSQL.
//! - `in_server`: `#[pg_test]`s, each inside one rolled-back transaction.
//! - `sessions`, `errors`, `security`, `races`, `fingerprint_props`: plain `#[test]`s over real client
//!   connections that commit, so they see what applications see. They run in parallel threads, so each
//!   test uses its own scope.

/// `#[pg_test]`s: run inside the server, one rolled-back transaction each. The module must be inline and
/// named `tests`: the harness calls `tests.<name>()`.
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Boots the harness for the client-side tests (see client::connect).
    #[pg_test]
    fn noop() {}

    /// A finish's answer for `token` at `now`, kept an hour, with `status_code` and no body.
    fn answer(token: i64, now: i64, status_code: i32) -> crate::direct::Finish {
        crate::direct::Finish {
            token,
            finished_at: now,
            expires_at: now + 3_600_000_000,
            status_code,
            response: None,
            response_bytes: None,
            headers: None,
        }
    }

    /// The direct path's insert of a key nobody holds: the row it claimed.
    fn claim_new(scope: &str, key: &str, fp: &[u8], now: i64) -> crate::key_row::KeyRow {
        match crate::direct::claim(scope, key, fp, now, now + 60_000_000, || true) {
            Some(crate::direct::Inserted::Claimed(row)) => row,
            Some(crate::direct::Inserted::Conflict | crate::direct::Inserted::Refused) => {
                panic!("{scope}/{key}: taken")
            }
            None => panic!("{scope}/{key}: the direct path declined"),
        }
    }

    /// The direct path's dirty read, as the row it found (`Some(None)`: none), for a key no other transaction
    /// writes. `None`: it declined.
    fn probe_row(scope: &str, key: &str, fp: &[u8]) -> Option<Option<crate::key_row::KeyRow>> {
        crate::direct::probe(scope, key, fp).map(|seen| {
            assert_eq!(seen.writer, crate::direct::Writer::Nobody, "{scope}/{key}");
            seen.row
        })
    }

    #[pg_test]
    fn claim_finish_replay_in_one_transaction() {
        let outcome = Spi::get_one::<String>(
            "SELECT (idem_claim('in_server', 'k', '{\"a\": 1}'::jsonb)).outcome",
        );
        assert_eq!(outcome, Ok(Some("claimed".into())));
        Spi::run(
            "SELECT idem_finish('in_server', 'k', currval('idem_keys_token_seq'), 200, '[1]'::jsonb)",
        )
        .unwrap();
        let replay = Spi::get_two::<String, pgrx::JsonB>(
            "SELECT (r).outcome, (r).response FROM (SELECT idem_claim('in_server', 'k', '{\"a\": 1.0}'::jsonb) r) s",
        )
        .unwrap();
        assert_eq!(replay.0.as_deref(), Some("replay"));
        assert_eq!(replay.1.unwrap().0, serde_json::json!([1]));
    }

    /// An answer read through SPI is copied into the call's memory, not the transaction's: 5,000 replays of a
    /// 2 kB answer in one transaction (this test's) left 16 MB in TopTransactionContext before.
    #[pg_test]
    fn spi_answers_do_not_pile_up_in_the_transaction() {
        Spi::run("SELECT idem_claim('memory', 'k', '{}'::jsonb)").unwrap();
        Spi::run(
            "SELECT idem_finish('memory', 'k', currval('idem_keys_token_seq'), 200, \
             jsonb_build_object('pad', repeat('x', 2000)))",
        )
        .unwrap();
        Spi::run("SET LOCAL idem_keys.direct_path = off").unwrap();
        let transaction_bytes = || {
            Spi::get_one::<i64>(
                "SELECT total_bytes FROM pg_backend_memory_contexts WHERE name = 'TopTransactionContext'",
            )
            .unwrap()
            .unwrap()
        };
        let before = transaction_bytes();
        let replays = Spi::get_one::<i64>(
            // left('k', g): a lookup with constant arguments would be a one-time filter (it is STABLE).
            "SELECT count(*) FROM generate_series(1, 5000) g \
             WHERE (idem_claim('memory', 'k', '{}'::jsonb)).outcome = 'replay' \
               AND (idem_lookup('memory', left('k', g))).outcome = 'replay'",
        );
        assert_eq!(replays, Ok(Some(5000)));
        let grown = transaction_bytes() - before;
        assert!(
            grown < 1 << 20,
            "TopTransactionContext grew by {grown} bytes"
        );
    }

    /// Under READ COMMITTED claims run without SPI (src/direct/), which draws a fencing token only when it
    /// inserts; the SPI statement's INSERT … ON CONFLICT draws one for every claim. So a replay shows which
    /// path ran, and that `idem_keys.direct_path = off` really switches to SPI.
    #[pg_test]
    fn only_the_spi_path_draws_a_token_for_a_replay() {
        Spi::run("SELECT idem_claim('direct', 'k', '{}'::jsonb)").unwrap();
        Spi::run("SELECT idem_finish('direct', 'k', currval('idem_keys_token_seq'), 200, '[]'::jsonb)")
            .unwrap();
        // currval is the last token this session drew: it moves exactly when the replay draws one (by how
        // much depends on the client tests, which draw theirs from the same sequence in parallel).
        let replay_draws_a_token = || {
            let last = || Spi::get_one::<i64>("SELECT currval('idem_keys_token_seq')").unwrap();
            let before = last();
            let outcome =
                Spi::get_one::<String>("SELECT (idem_claim('direct', 'k', '{}'::jsonb)).outcome");
            assert_eq!(outcome, Ok(Some("replay".into())));
            last() != before
        };
        assert!(!replay_draws_a_token(), "direct path");
        Spi::run("SET LOCAL idem_keys.direct_path = off").unwrap();
        assert!(replay_draws_a_token(), "SPI path");
    }

    /// On every major the direct path itself claims and finishes (16+ need a real RTEPermissionInfo for the
    /// finish's update, or it raises "invalid perminfoindex 0"), and SPI then reads what it wrote.
    #[pg_test]
    fn direct_path_claims_and_finishes_on_this_major() {
        let now = crate::store::clock_now();
        let fp = [7u8; 32];
        assert!(
            matches!(probe_row("served", "k", &fp), Some(None)),
            "absent"
        );
        let row = claim_new("served", "k", &fp, now);
        assert!(row.inserted);
        // A second insert of the key: the speculative insertion finds the conflict and says so, without
        // waiting or reading (the claim reads again).
        assert!(matches!(
            crate::direct::claim("served", "k", &fp, now, now + 60_000_000, || true),
            Some(crate::direct::Inserted::Conflict)
        ));
        let probed = probe_row("served", "k", &fp)
            .unwrap()
            .expect("the claimed row");
        assert!(!probed.inserted && probed.same_request && !probed.finished);
        assert_eq!(probed.token, row.token);
        assert!(
            !probe_row("served", "k", &[8u8; 32])
                .unwrap()
                .unwrap()
                .same_request
        );
        let answer = answer(row.token, now, 201);
        assert_eq!(crate::direct::finish("served", "k", &answer), Some(true));
        assert_eq!(
            crate::direct::finish("served", "k", &answer),
            Some(false),
            "finished already"
        );
        let stored = Spi::get_one::<i32>(
            "SELECT status_code FROM idem_keys WHERE scope = 'served' AND finished_at IS NOT NULL",
        );
        assert_eq!(stored, Ok(Some(201)));
        let finished = probe_row("served", "k", &fp).unwrap().unwrap();
        assert!(finished.finished && finished.answer.status_code == Some(201));
        // In the transaction that wrote the row: the lookup sees it, as its SPI statement would.
        let looked = Spi::get_one::<String>("SELECT (idem_lookup('served', 'k')).outcome");
        assert_eq!(looked, Ok(Some("replay".into())));
    }

    /// The direct path serves the table sql/ creates, on every major (a silent decline would pass every
    /// other test, at SPI speed), and declines each change it would not honour, saying which. The answers
    /// under each change are the SPI statements' (tests/pg_regress/sql/direct_declines.sql).
    #[pg_test]
    fn direct_path_declines_exactly_what_it_would_not_honour() {
        use crate::direct::by_key::ReadIndex::Hash;
        use crate::direct::reader::check_read;
        use crate::direct::shape::Decline::*;
        use crate::direct::table::check;
        assert_eq!(
            check(),
            Ok(1),
            "the table as sql/ creates it: the primary key is the arbiter"
        );
        Spi::run("CREATE ROLE idem_test_other").unwrap();
        let cases = [
            // A DBA's concurrent rebuild of a bloated primary key: an exact copy is one more arbiter.
            ("CREATE UNIQUE INDEX idem_copy ON idem_keys (scope, key)", "DROP INDEX idem_copy", Ok(2)),
            ("CREATE UNIQUE INDEX idem_swapped ON idem_keys (key, scope)", "DROP INDEX idem_swapped", Err(UniqueIndex)),
            ("CREATE UNIQUE INDEX idem_part ON idem_keys (scope, key) WHERE scope <> ''", "DROP INDEX idem_part", Err(UniqueIndex)),
            ("CREATE UNIQUE INDEX idem_ci ON idem_keys (scope, key COLLATE \"POSIX\")", "DROP INDEX idem_ci", Err(UniqueIndex)),
            ("CREATE INDEX idem_plain ON idem_keys (scope, created_at)", "DROP INDEX idem_plain", Ok(1)),
            (
                "ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD PRIMARY KEY (scope, key, token)",
                "ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key)",
                Err(PrimaryKey),
            ),
            (
                "ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD PRIMARY KEY (token), ADD CONSTRAINT sk UNIQUE (scope, key)",
                "ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, DROP CONSTRAINT sk, ADD CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key)",
                Err(PrimaryKey),
            ),
            // A deferrable key comes with the trigger that rechecks it at commit.
            (
                "ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key) DEFERRABLE",
                "ALTER TABLE idem_keys DROP CONSTRAINT idem_keys_pkey, ADD CONSTRAINT idem_keys_pkey PRIMARY KEY (scope, key)",
                Err(Triggers),
            ),
            ("ALTER TABLE idem_keys ALTER attempt SET DEFAULT 1", "ALTER TABLE idem_keys ALTER attempt DROP DEFAULT", Err(Columns)),
            (
                "ALTER TABLE idem_keys ALTER token ADD GENERATED BY DEFAULT AS IDENTITY",
                "ALTER TABLE idem_keys ALTER token DROP IDENTITY",
                Err(Columns),
            ),
            ("ALTER TABLE idem_keys ADD CONSTRAINT c CHECK (attempt > 0)", "ALTER TABLE idem_keys DROP CONSTRAINT c", Err(Triggers)),
            // Row security does not apply to the table's owner unless forced.
            ("ALTER TABLE idem_keys ENABLE ROW LEVEL SECURITY", "ALTER TABLE idem_keys DISABLE ROW LEVEL SECURITY", Ok(1)),
            ("ALTER TABLE idem_keys FORCE ROW LEVEL SECURITY", "ALTER TABLE idem_keys NO FORCE ROW LEVEL SECURITY", Err(RowSecurity)),
            ("ALTER TABLE idem_keys OWNER TO idem_test_other", "ALTER TABLE idem_keys OWNER TO CURRENT_USER", Err(Owner)),
            (
                "ALTER TABLE idem_keys ENABLE ROW LEVEL SECURITY, OWNER TO idem_test_other",
                "ALTER TABLE idem_keys DISABLE ROW LEVEL SECURITY, OWNER TO CURRENT_USER",
                Err(RowSecurity),
            ),
        ];
        for (change, undo, expected) in cases {
            // The reader's cached verdict is warm here; the change must reach it before any full open.
            assert_eq!(check_read(), Ok(Hash), "before {change}");
            Spi::run(change).unwrap();
            assert_eq!(check_read(), expected.map(|_| Hash), "reader: {change}");
            assert_eq!(check(), expected, "{change}");
            Spi::run(undo).unwrap();
            assert_eq!(check_read(), Ok(Hash), "reader: {undo}");
            assert_eq!(check(), Ok(1), "{undo}");
        }
        // An inheritance child: an UPDATE of idem_keys would reach its rows. PostgreSQL clears the parent's
        // relhassubclass only at its next VACUUM or ANALYZE outside a transaction block, so the decline
        // outlasts a dropped child until then, as the planner's own check does.
        Spi::run("CREATE TABLE idem_child () INHERITS (idem_keys)").unwrap();
        assert_eq!(
            check_read(),
            Err(NotPlainTable),
            "reader: inheritance child"
        );
        assert_eq!(check(), Err(NotPlainTable), "inheritance child");
        Spi::run("DROP TABLE idem_child").unwrap();
        assert_eq!(
            check(),
            Err(NotPlainTable),
            "relhassubclass stays until VACUUM or ANALYZE"
        );
    }

    /// Reads by key go through the hash of scope || key that sql/ creates, and through the primary key when
    /// that index is gone or of any other shape; either way they find exactly the key's row, also among rows
    /// whose scope || key is the same text (the hash index's entries are equal there, the rows are not).
    #[pg_test]
    fn reads_by_key_use_the_hash_index_and_check_each_row() {
        use crate::direct::by_key::ReadIndex::*;
        use crate::direct::reader::check_read;
        assert_eq!(
            Spi::get_one::<i64>(
                "SELECT oid::int8 FROM pg_opfamily WHERE opfname = 'text_ops' AND opfmethod = (SELECT oid FROM pg_am WHERE amname = 'hash')"
            ),
            Ok(Some(1995)),
            "the text hash operator family by_key.rs names"
        );
        let fp = [7u8; 32];
        let now = crate::store::clock_now();
        // ('ab', 'c'), ('a', 'bc') and ('', 'abc') all concatenate to 'abc'; only the second is claimed first.
        for (scope, key) in [("a", "bc"), ("ab", "c"), ("", "abc")] {
            let row = claim_new(scope, key, &fp, now);
            assert!(row.inserted, "{scope}/{key}");
        }
        let token_of = |scope: &str, key: &str| {
            Spi::get_one_with_args::<i64>(
                "SELECT token FROM idem_keys WHERE scope = $1 AND key = $2",
                &[scope.into(), key.into()],
            )
            .unwrap()
        };
        let shapes = [
            ("", Hash),
            ("SELECT 'no hash index at all'", Primary),
            ("CREATE INDEX idem_keys_key_hash_idx ON idem_keys USING hash (key)", Primary),
            ("CREATE INDEX idem_keys_key_hash_idx ON idem_keys USING hash ((key || scope))", Primary),
            ("CREATE INDEX idem_keys_key_hash_idx ON idem_keys USING hash ((scope || key)) WHERE scope <> 'a'", Primary),
            ("CREATE INDEX idem_keys_key_hash_idx ON idem_keys USING hash ((scope || key COLLATE \"POSIX\"))", Primary),
            ("CREATE INDEX idem_keys_key_hash_idx ON idem_keys (((scope || key)))", Primary),
            ("CREATE INDEX idem_other_name ON idem_keys USING hash ((scope || key))", Hash),
        ];
        for (change, expected) in shapes {
            if !change.is_empty() {
                // Each shape replaces the one before (sql/'s own first).
                Spi::run("DROP INDEX IF EXISTS idem_keys_key_hash_idx").unwrap();
                Spi::run("DROP INDEX IF EXISTS idem_other_name").unwrap();
                Spi::run(change).unwrap();
            }
            assert_eq!(check_read(), Ok(expected), "{change}");
            for (scope, key) in [("a", "bc"), ("ab", "c"), ("", "abc")] {
                let read = probe_row(scope, key, &fp)
                    .unwrap()
                    .expect("the row");
                assert_eq!(
                    Some(read.token),
                    token_of(scope, key),
                    "{change}: {scope}/{key}"
                );
                let looked = crate::direct::lookup(scope, key, false)
                    .unwrap()
                    .expect("the row");
                assert_eq!(
                    Some(looked.token),
                    token_of(scope, key),
                    "{change}: {scope}/{key}"
                );
            }
            assert!(
                matches!(probe_row("abc", "", &fp), Some(None)),
                "{change}"
            );
            assert!(
                matches!(crate::direct::lookup("a", "b", false), Some(None)),
                "{change}"
            );
            // A finish reads the key the same way: it stores the answer on that row and no other.
            let answer = answer(token_of("ab", "c").unwrap(), now, 200);
            assert_eq!(
                crate::direct::finish("a", "bc", &answer),
                Some(false),
                "{change}: not its token"
            );
            assert_eq!(
                crate::direct::finish("ab", "c", &answer),
                Some(true),
                "{change}"
            );
            let finished = Spi::get_one::<i64>(
                "SELECT count(*) FROM idem_keys WHERE scope IN ('a', 'ab', '') AND finished_at IS NOT NULL",
            );
            assert_eq!(finished, Ok(Some(1)), "{change}");
            // The finish wrote a new version (not HOT: finished_at is in the partial indexes' predicates),
            // and its hash entry with it: the read finds the finished row.
            let read = probe_row("ab", "c", &fp)
                .unwrap()
                .expect("the row");
            assert!(read.finished, "{change}");
            // The index's entries as PostgreSQL's own index scan reads them: one per live row.
            Spi::run("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off").unwrap();
            let indexed =
                Spi::get_one::<i64>("SELECT count(*) FROM idem_keys WHERE scope || key = 'abc'");
            Spi::run("RESET enable_seqscan; RESET enable_bitmapscan").unwrap();
            assert_eq!(indexed, Ok(Some(3)), "{change}");
            Spi::run("UPDATE idem_keys SET finished_at = NULL WHERE scope = 'ab'").unwrap();
        }
    }

    /// Rows whose scope || key is the same text share a hash (so do rows a client crafts to collide): past
    /// `MAX_OTHER_ROWS` of them a read goes through the primary key, and every answer stays the key's own.
    #[pg_test]
    fn a_crowded_hash_leaves_the_read_to_the_primary_key() {
        use crate::direct::by_key::MAX_OTHER_ROWS;
        let text = "0123456789abcdefghij";
        let splits: Vec<(&str, &str)> = (0..=text.len()).map(|i| text.split_at(i)).collect();
        let present = MAX_OTHER_ROWS + 4;
        let fp = [7u8; 32];
        let now = crate::store::clock_now();
        let tokens: Vec<i64> = splits[..present]
            .iter()
            .map(|&(scope, key)| {
                let row =
                    claim_new(scope, key, &fp, now);
                assert!(row.inserted, "{scope}/{key}");
                row.token
            })
            .collect();
        // An absent key behind more rows of its hash than the bound: the reader gives up on the index...
        let (scope, key) = splits[present];
        assert!(probe_row(scope, key, &fp).is_none(), "probe");
        assert!(crate::direct::lookup(scope, key, false).is_none(), "lookup");
        // ...and idem_claim and idem_lookup answer through the primary key.
        let claimed = Spi::get_one_with_args::<String>(
            "SELECT (idem_claim($1, $2, '{}'::jsonb)).outcome",
            &[scope.into(), key.into()],
        );
        assert_eq!(claimed, Ok(Some("claimed".into())));
        let looked = Spi::get_one_with_args::<String>(
            "SELECT (idem_lookup($1, $2)).outcome",
            &[scope.into(), key.into()],
        );
        assert_eq!(looked, Ok(Some("in_progress".into())));
        // Now 13 rows share the hash. Whatever their order in the bucket, the scan reaches at least three of
        // the present keys after more than MAX_OTHER_ROWS others; the rest it finds, each its own row.
        let mut crowded = vec![];
        for (i, &(scope, key)) in splits[..present].iter().enumerate() {
            match probe_row(scope, key, &fp) {
                None => crowded.push(i),
                Some(row) => assert_eq!(row.map(|r| r.token), Some(tokens[i]), "{scope}/{key}"),
            }
        }
        assert!(crowded.len() >= 3, "crowded: {crowded:?}");
        // A finish of a crowded key (nothing moved since the probes) reads it through the primary key and
        // stores its answer; then every other key's.
        let order = crowded
            .iter()
            .copied()
            .chain((0..present).filter(|i| !crowded.contains(i)));
        for i in order {
            let (scope, key) = splits[i];
            let answer = answer(tokens[i], now, 200 + i as i32);
            assert_eq!(
                crate::direct::finish(scope, key, &answer),
                Some(true),
                "{scope}/{key}"
            );
            let stored = Spi::get_one_with_args::<i32>(
                "SELECT status_code FROM idem_keys WHERE scope = $1 AND key = $2",
                &[scope.into(), key.into()],
            );
            assert_eq!(stored, Ok(Some(200 + i as i32)), "{scope}/{key}");
        }
    }

    #[pg_test]
    fn settings_have_their_documented_defaults() {
        for (name, value) in [
            ("idem_keys.lease", "5min"),
            ("idem_keys.retention", "1d"),
            ("idem_keys.abandon_after", "7d"),
            ("idem_keys.max_response_bytes", "1MB"),
            ("idem_keys.sweep_batch_size", "200"),
            ("idem_keys.sweep_delay", "2ms"),
            ("idem_keys.direct_path", "on"),
        ] {
            let shown =
                Spi::get_one_with_args::<String>("SELECT current_setting($1)", &[name.into()])
                    .unwrap();
            assert_eq!(shown.as_deref(), Some(value), "{name}");
        }
    }

    #[pg_test]
    fn lease_and_retention_settings_apply_when_arguments_are_null() {
        Spi::run("SET LOCAL idem_keys.lease = '10s'; SET LOCAL idem_keys.retention = '2h'")
            .unwrap();
        Spi::run("SELECT idem_claim('guc', 'k', '{}'::jsonb)").unwrap();
        let retry_after =
            Spi::get_one::<i32>("SELECT (idem_claim('guc', 'k', '{}'::jsonb)).retry_after")
                .unwrap()
                .unwrap();
        assert!((1..=10).contains(&retry_after), "{retry_after}");
        Spi::run("SELECT idem_finish('guc', 'k', (SELECT token FROM idem_keys WHERE scope = 'guc'), 200, NULL::jsonb)").unwrap();
        let retention = Spi::get_one::<bool>(
            "SELECT expires_at - finished_at = interval '2 hours' FROM idem_keys WHERE scope = 'guc'",
        );
        assert_eq!(retention, Ok(Some(true)));
        Spi::run("SET LOCAL idem_keys.max_response_bytes = 20").unwrap();
        let token = Spi::get_one::<i64>("SELECT (idem_claim('guc', 'big', '{}'::jsonb)).token")
            .unwrap()
            .unwrap();
        // A 20-byte limit takes a 15-byte jsonb string (a too-large one is in errors.rs: 54000).
        Spi::run_with_args(
            "SELECT idem_finish('guc', 'big', $1, 200, '\"0123456\"'::jsonb)",
            &[token.into()],
        )
        .unwrap();
        let stored =
            Spi::get_one::<String>("SELECT response::text FROM idem_keys WHERE key = 'big'");
        assert_eq!(stored, Ok(Some("\"0123456\"".into())));
    }

    /// The fingerprint's text of a JSON request is written from the binary value (src/fingerprint/jsonb_text.rs); it
    /// must be PostgreSQL's jsonb_out text byte for byte, on every major.
    #[pg_test]
    fn jsonb_text_is_jsonb_out() {
        super::jsonb_text_cases::check_all();
    }

    /// Past its depth and size limits the walk declines, and the fingerprint is PostgreSQL's text's.
    #[pg_test]
    fn jsonb_text_declines_deep_and_large_values() {
        super::jsonb_text_cases::check_limits();
    }

    #[pg_test]
    fn bytea_fingerprint_is_sha256() {
        let same = Spi::get_one::<bool>(
            "SELECT idem_fingerprint('\\xdeadbeef'::bytea) = sha256('\\xdeadbeef'::bytea)",
        );
        assert_eq!(same, Ok(Some(true)));
    }
}

#[cfg(test)]
mod client;
#[cfg(test)]
mod errors;
#[cfg(test)]
mod fingerprint_props;
mod jsonb_text_cases;
#[cfg(test)]
mod races;
#[cfg(test)]
mod security;
#[cfg(test)]
mod sessions;
#[cfg(test)]
mod waiting;
