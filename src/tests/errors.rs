//! Every row of the SQLSTATE table (docs/errors.md): the code, and that nothing was written.

use super::client::*;

/// (what, SQL, expected SQLSTATE). `$1` is the token of the claimed key `e/k`.
const CASES: &[(&str, &str, &str)] = &[
    (
        "NULL scope",
        "SELECT idem_claim(NULL, 'n', '{}'::jsonb) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL key",
        "SELECT idem_claim('e', NULL, '{}'::jsonb) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL request",
        "SELECT idem_claim('e', 'n', NULL::jsonb) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL bytea request",
        "SELECT idem_claim('e', 'n', NULL::bytea) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL body request",
        "SELECT idem_claim('e', 'n', NULL::bytea, true) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL is_json",
        "SELECT idem_claim('e', 'n', '\\x7b7d'::bytea, NULL::boolean) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL method",
        "SELECT idem_claim('e', 'n', NULL::text, '/', '\\x7b7d'::bytea, true) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL target",
        "SELECT idem_claim('e', 'n', 'POST', NULL::text, '\\x7b7d'::bytea, true) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL token",
        "SELECT idem_finish('e', 'k', NULL, 200, '{}'::jsonb) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL status_code",
        "SELECT idem_finish('e', 'k', $1, NULL, '{}'::jsonb)",
        "22004",
    ),
    (
        "NULL release token",
        "SELECT idem_release('e', 'k', NULL) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "NULL lookup key",
        "SELECT idem_lookup('e', NULL) WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "empty key",
        "SELECT idem_claim('e', '', '{}'::jsonb) WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "key of 256 characters",
        "SELECT idem_claim('e', repeat('é', 256), '{}'::jsonb) WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "scope of 256 characters",
        "SELECT idem_claim(repeat('s', 256), 'n', '{}'::jsonb) WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "zero lease",
        "SELECT idem_claim('e', 'n', '{}'::jsonb, lease => '0 seconds') WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "negative lease",
        "SELECT idem_claim('e', 'n', '{}'::jsonb, lease => '-1 day') WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "status 99",
        "SELECT idem_finish('e', 'k', $1, 99, '{}'::jsonb)",
        "22023",
    ),
    (
        "status 600",
        "SELECT idem_finish('e', 'k', $1, 600, '{}'::jsonb)",
        "22023",
    ),
    (
        "headers array",
        "SELECT idem_finish('e', 'k', $1, 200, '{}'::jsonb, headers => '[]'::jsonb)",
        "22023",
    ),
    (
        "headers scalar",
        "SELECT idem_finish('e', 'k', $1, 200, '{}'::jsonb, headers => '\"x\"'::jsonb)",
        "22023",
    ),
    (
        "zero retention",
        "SELECT idem_finish('e', 'k', $1, 200, '{}'::jsonb, retention => '0')",
        "22023",
    ),
    (
        "finish key too long",
        "SELECT idem_finish('e', repeat('k', 300), $1, 200, '{}'::jsonb)",
        "22023",
    ),
    (
        "sweep batch 0",
        "SELECT idem_sweep(0) WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "stale max_rows 0",
        "SELECT * FROM idem_stale(max_rows => 0) WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "stale negative age",
        "SELECT * FROM idem_stale(older_than => '-1 s') WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "response too large",
        "SELECT idem_finish('e', 'k', $1, 200, to_jsonb(repeat('x', 2000000)))",
        "54000",
    ),
    (
        "bytes too large",
        "SELECT idem_finish('e', 'k', $1, 200, convert_to(repeat('x', 2000000), 'UTF8'))",
        "54000",
    ),
    (
        "finish unknown key",
        "SELECT idem_finish('e', 'nobody', $1, 200, '{}'::jsonb)",
        "P0002",
    ),
    (
        "release unknown key",
        "SELECT idem_release('e', 'nobody', $1)",
        "P0002",
    ),
    (
        "finish with a wrong token",
        "SELECT idem_finish('e', 'k', $1::bigint + 1000000, 200, '{}'::jsonb)",
        "55000",
    ),
    (
        "negative wait",
        "SELECT idem_claim('e', 'k', '{}'::jsonb, wait => '-1 s') WHERE $1::bigint > 0",
        "22023",
    ),
    (
        "NULL checkpoint",
        "SELECT idem_checkpoint('e', 'k', $1, NULL)",
        "22004",
    ),
    (
        "NULL checkpoint token",
        "SELECT idem_checkpoint('e', 'k', NULL, 'p') WHERE $1::bigint > 0",
        "22004",
    ),
    (
        "empty checkpoint",
        "SELECT idem_checkpoint('e', 'k', $1, '')",
        "22023",
    ),
    (
        "checkpoint of 256 characters",
        "SELECT idem_checkpoint('e', 'k', $1, repeat('p', 256))",
        "22023",
    ),
    (
        "checkpoint state too large",
        "SELECT idem_checkpoint('e', 'k', $1, 'p', to_jsonb(repeat('x', 2000000)))",
        "54000",
    ),
    (
        "checkpoint unknown key",
        "SELECT idem_checkpoint('e', 'nobody', $1, 'p')",
        "P0002",
    ),
    (
        "checkpoint with a wrong token",
        "SELECT idem_checkpoint('e', 'k', $1::bigint + 1000000, 'p')",
        "55000",
    ),
];

#[test]
fn every_bad_input_has_its_sqlstate_and_writes_nothing() {
    let mut c = connect();
    let token = claim(&mut c, "e", "k", "{}").token.unwrap();
    let before = scope_digest(&mut c, "e");
    for (what, sql, code) in CASES {
        let error = c.query(*sql, &[&token]).expect_err(what);
        let got = error
            .as_db_error()
            .unwrap_or_else(|| panic!("{what}: {error}"))
            .code()
            .code();
        assert_eq!(got, *code, "{what}: {sql}");
        assert_eq!(scope_digest(&mut c, "e"), before, "{what} changed a row");
    }
}

#[test]
fn errors_carry_a_message_and_a_hint() {
    let mut c = connect();
    let error = c
        .query("SELECT idem_claim('e2', '', '{}'::jsonb)", &[])
        .unwrap_err();
    let db = error.as_db_error().unwrap();
    assert_eq!(db.message(), "idempotency key must not be empty");
    assert!(db.hint().unwrap().contains("1 to 255"));

    let token = claim(&mut c, "e2", "k", "{}").token.unwrap();
    expire_lease(&mut c, "e2", "k");
    claim(&mut c, "e2", "k", "{}");
    let error = finish(&mut c, "e2", "k", token, 200, "{}").unwrap_err();
    let db = error.as_db_error().unwrap();
    assert_eq!(
        db.message(),
        format!("token {token} does not own this idempotency key")
    );
    assert!(db.detail().unwrap().contains("recovered"));
}

#[test]
fn settings_are_bounded_and_their_prefix_is_reserved() {
    let mut c = connect();
    // Settings are checked once the library is loaded; a call loads it (preloading does it at start).
    c.batch_execute("SELECT idem_fingerprint('\\x'::bytea)")
        .unwrap();
    for sql in [
        "SET idem_keys.lease = 0",
        "SET idem_keys.retention = -1",
        "SET idem_keys.sweep_batch_size = 0",
    ] {
        assert_eq!(sqlstate(c.batch_execute(sql)), "22023", "{sql}");
    }
    assert_eq!(
        sqlstate(c.batch_execute("SET idem_keys.leese = '1s'")),
        "42602",
        "typos are refused"
    );
}
