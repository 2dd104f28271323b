//! Helpers for client-side tests: a booted harness, typed claim results, SQLSTATE checks.

use postgres::{Client, Error};

/// Boots the harness's server (through the no-op `#[pg_test]`) and opens a real session.
pub fn connect() -> Client {
    pgrx_tests::run_test("noop", None, crate::pg_test::postgresql_conf_options()).unwrap();
    pgrx_tests::client().unwrap().0
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Claim {
    pub outcome: String,
    pub token: Option<i64>,
    pub attempt: Option<i32>,
    pub status_code: Option<i32>,
    pub response: Option<String>,
    pub response_bytes: Option<Vec<u8>>,
    pub headers: Option<String>,
    pub retry_after: Option<i32>,
}

const RESULT_COLUMNS: &str =
    "(r).outcome, (r).token, (r).attempt, (r).status_code, (r).response::text, \
                              (r).response_bytes, (r).headers::text, (r).retry_after";

fn row_to_claim(row: &postgres::Row) -> Claim {
    Claim {
        outcome: row.get(0),
        token: row.get(1),
        attempt: row.get(2),
        status_code: row.get(3),
        response: row.get(4),
        response_bytes: row.get(5),
        headers: row.get(6),
        retry_after: row.get(7),
    }
}

/// idem_claim with a JSON request given as text.
pub fn claim(c: &mut Client, scope: &str, key: &str, request: &str) -> Claim {
    try_claim(c, scope, key, request, None).unwrap()
}

pub fn try_claim(
    c: &mut Client,
    scope: &str,
    key: &str,
    request: &str,
    lease: Option<&str>,
) -> Result<Claim, Error> {
    let sql = format!(
        "SELECT {RESULT_COLUMNS} FROM (SELECT idem_claim($1, $2, $3::text::jsonb, lease => $4::text::interval) AS r) s"
    );
    c.query_one(&sql, &[&scope, &key, &request, &lease])
        .map(|row| row_to_claim(&row))
}

pub fn lookup(c: &mut Client, scope: &str, key: &str) -> Option<Claim> {
    let sql = format!("SELECT {RESULT_COLUMNS} FROM (SELECT idem_lookup($1, $2) AS r) s WHERE (r).outcome IS NOT NULL");
    c.query_opt(&sql, &[&scope, &key])
        .unwrap()
        .map(|row| row_to_claim(&row))
}

pub fn finish(
    c: &mut Client,
    scope: &str,
    key: &str,
    token: i64,
    status: i32,
    response: &str,
) -> Result<(), Error> {
    c.execute(
        "SELECT idem_finish($1, $2, $3, $4, $5::text::jsonb)",
        &[&scope, &key, &token, &status, &response],
    )
    .map(|_| ())
}

/// The SQLSTATE of a failed statement.
pub fn sqlstate(result: Result<impl std::fmt::Debug, Error>) -> String {
    let error = result.expect_err("the statement should have failed");
    error
        .as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {error}"))
        .code()
        .code()
        .to_string()
}

/// A digest of every row of a scope, to prove a failed call changed nothing.
pub fn scope_digest(c: &mut Client, scope: &str) -> String {
    c.query_one(
        "SELECT count(*)::text || ':' || coalesce(md5(string_agg(k::text, '|' ORDER BY key)), '')
           FROM idem_keys k WHERE scope = $1",
        &[&scope],
    )
    .unwrap()
    .get(0)
}

/// Moves a key's lease end into the past, as if its owner had died long ago.
pub fn expire_lease(c: &mut Client, scope: &str, key: &str) {
    c.execute(
        "UPDATE idem_keys SET lease_ends_at = clock_timestamp() - interval '1 second' WHERE scope = $1 AND key = $2",
        &[&scope, &key],
    )
    .unwrap();
}

/// Moves a finished key's end of retention into the past.
pub fn expire_answer(c: &mut Client, scope: &str, key: &str) {
    c.execute(
        "UPDATE idem_keys SET expires_at = clock_timestamp() - interval '1 second' WHERE scope = $1 AND key = $2",
        &[&scope, &key],
    )
    .unwrap();
}
