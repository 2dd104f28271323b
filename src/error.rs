//! One constructor per failure the SQL surface can report. Each raises an ERROR with a documented
//! SQLSTATE (see docs/errors.md), a message that says what was wrong, and a DETAIL/HINT where they help.
//! All of them are raised before anything is written, or roll the statement back with it.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{function_name, PgLogLevel, PgSqlErrorCode};

/// `raise` with the calling constructor's name.
macro_rules! raise {
    ($($arg:expr),+ $(,)?) => {
        raise(function_name!(), $($arg),+)
    };
}

/// Every constructor is `#[track_caller]`, so the report's file and line are where the API detected the
/// failure (src/api/…), and its function is the constructor's name, which says which failure it was.
#[track_caller]
fn raise(
    funcname: &'static str,
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<&str>,
) -> ! {
    let mut report = ErrorReport::new(code, message, funcname);
    if let Some(detail) = detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// 22004: a required argument was NULL. A silent NULL result would look like a decision, so we refuse.
#[track_caller]
pub fn null_argument(function: &str, argument: &str) -> ! {
    let hint = match argument {
        "key" => "A request without an Idempotency-Key is the application's 400; do not claim it.",
        "token" => "Pass the token that idem_claim returned with outcome claimed or recovered.",
        "point" => "Name the step the request has reached, e.g. 'charged'.",
        _ => "Only response, headers, state, lease, wait, retention and batch_size may be NULL.",
    };
    raise!(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("{function}: {argument} must not be NULL"),
        None,
        Some(hint),
    )
}

/// 22023: a key or checkpoint name (`what`) that is empty (`chars` = 0) or longer than `limit`.
#[track_caller]
fn bad_name(what: &str, chars: usize, limit: usize, hint: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        if chars == 0 {
            format!("{what} must not be empty")
        } else {
            format!("{what} is {chars} characters long; the limit is {limit}")
        },
        None,
        Some(hint),
    )
}

/// 22023: key empty or too long.
#[track_caller]
pub fn bad_key(chars: usize, limit: usize) -> ! {
    bad_name(
        "idempotency key",
        chars,
        limit,
        "Use a client-generated UUID or a similar random string of 1 to 255 characters.",
    )
}

/// 22023: scope too long.
#[track_caller]
pub fn bad_scope(chars: usize, limit: usize) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("scope is {chars} characters long; the limit is {limit}"),
        None,
        Some("A scope names a tenant or an endpoint, e.g. 'acct_42:POST /payments'."),
    )
}

/// 22023: HTTP status outside 100–599.
#[track_caller]
pub fn bad_status_code(status_code: i32) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("status_code {status_code} is not an HTTP status code"),
        None,
        Some("status_code must be between 100 and 599."),
    )
}

/// 22023: headers given but not a JSON object.
#[track_caller]
pub fn headers_not_object(found: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        "headers must be a JSON object".to_string(),
        Some(format!("Got a JSON {found}.")),
        Some(r#"Pass e.g. '{"Content-Type": "application/json"}'::jsonb, or NULL for none."#),
    )
}

/// 22023: a lease, retention or similar duration that is zero or negative.
#[track_caller]
pub fn not_positive(argument: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("{argument} must be a positive interval"),
        None,
        Some("Pass NULL to use the idem_keys.* default, or an interval such as '30 seconds'."),
    )
}

/// 22023: a duration that may be zero but not negative (wait).
#[track_caller]
pub fn negative(argument: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("{argument} must not be a negative interval"),
        None,
        Some("Pass '0' (or NULL) not to wait, or an interval such as '2 seconds'."),
    )
}

/// 22023: checkpoint name empty or too long.
#[track_caller]
pub fn bad_checkpoint(chars: usize, limit: usize) -> ! {
    bad_name(
        "checkpoint name",
        chars,
        limit,
        "Name the step the request has reached, e.g. 'charged' or 'email_sent'.",
    )
}

/// 22023: a count argument that is zero or negative.
#[track_caller]
pub fn not_positive_count(argument: &str, value: i32) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("{argument} must be positive, got {value}"),
        None,
        Some("Pass NULL to use the default."),
    )
}

/// 54000: a response, headers or checkpoint state over idem_keys.max_response_bytes.
#[track_caller]
pub fn too_large(argument: &str, bytes: usize, limit: usize) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!("{argument} is {bytes} bytes; idem_keys.max_response_bytes is {limit}"),
        None,
        Some("Store a reference to the result (an id) instead of the whole body, or have an administrator raise idem_keys.max_response_bytes."),
    )
}

/// P0002: finish or release of a key that does not exist (never claimed, released, swept, or expired).
#[track_caller]
pub fn unknown_key(function: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_NO_DATA_FOUND,
        format!("{function}: no such idempotency key"),
        Some("The key was never claimed, was released, or its retention ended.".to_string()),
        Some("Call idem_claim first and use the token it returns."),
    )
}

/// 23505: a claim this transaction made without writing it (src/pending.rs) could not be written, because a
/// row of the key appeared anyway: something wrote the table without the idem_* functions, which check the
/// key lock the claim holds. The transaction (or its commit) fails, so no two owners ever both commit.
#[track_caller]
pub fn claim_lost(scope: &str, key: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION,
        "idempotency key was written by someone else while this transaction held its claim".to_string(),
        Some(format!("Scope {scope:?}, key {key:?}: a row of the key was inserted without idem_claim.")),
        Some("Write idem_keys only through the idem_* functions; retry the request."),
    )
}

/// 0A000: a sweep called on a Citus coordinator, which holds none of the distributed table's rows.
#[track_caller]
pub fn sweep_on_coordinator(function: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("{function}: this Citus coordinator holds no idem_keys rows to sweep"),
        Some("idem_keys is distributed: its rows are in the workers' shards, and each worker sweeps its own.".to_string()),
        Some("Sweep on the workers: SELECT * FROM run_command_on_workers($$SELECT idem_sweep()$$) from here, or schedule the sweep on each worker (pg_cron there, or the background worker with idem_keys.sweep_databases)."),
    )
}

/// 55000: the token does not own the key (any more): someone recovered it after the lease ran out. The
/// current owner's token is a capability, so it is never shown.
#[track_caller]
pub fn token_not_owner(token: i64) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("token {token} does not own this idempotency key"),
        Some("Another owner recovered the key after this token's lease ran out, or the token is wrong.".to_string()),
        Some("Do not report this attempt's result; the new owner reconciles and answers. Choose a longer lease if this happens often."),
    )
}

/// 55000: a checkpoint on a key that already has its answer.
#[track_caller]
pub fn checkpoint_after_finish() -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "idempotency key is already finished; it takes no more checkpoints".to_string(),
        None,
        Some("Checkpoint before idem_finish; a finished key only replays its answer."),
    )
}

/// 42501: tenant binding is on and the scope is not the caller's tenant's. Says nothing about the scope's
/// keys: the check runs before any read.
#[track_caller]
pub fn foreign_scope(function: &str, scope: &str, tenant: &str, separator: char) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("{function}: permission denied for scope \"{scope}\""),
        Some(format!(
            "Tenant binding is on and the caller's tenant is \"{tenant}\": it may use the scope \"{tenant}\" and scopes that start with \"{tenant}{separator}\"."
        )),
        Some("Put the caller's tenant first in the scope, e.g. 'acme:POST /payments' for tenant acme."),
    )
}

/// 42501: tenant binding is on and the caller has no usable tenant, so no scope is theirs.
#[track_caller]
pub fn no_tenant(function: &str, binding: &str, why: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("{function}: permission denied: the caller has no tenant"),
        Some(format!("idem_keys.tenant_binding is {binding}. {why}")),
        Some(match binding {
            "setting" => "Set the tenant for the request (SET LOCAL, or set_config(…, true)) before calling idem_keys, in the setting idem_keys.tenant_setting names.",
            "jwt" => "Call through an API layer that puts the verified token's claims in request.jwt.claims (PostgREST does), with the claim idem_keys.tenant_claim names.",
            _ => "Connect or SET ROLE as the tenant's role.",
        }),
    )
}

/// 25006: a write on a hot standby.
#[track_caller]
pub fn read_only_standby(function: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("{function} cannot run on a hot standby"),
        Some("This server is in recovery: it replays the primary's keys but cannot claim, finish or sweep them.".to_string()),
        Some("Send idem_claim, idem_finish, idem_release, idem_checkpoint and idem_sweep to the primary; idem_lookup and idem_stats work here."),
    )
}

/// 55000: the library was upgraded but the database's extension objects were not.
#[track_caller]
pub fn catalog_needs_update(catalog_version: &str) -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "the idem_keys library is version {} but this database's extension is version {catalog_version}",
            env!("CARGO_PKG_VERSION")
        ),
        None,
        Some("Run ALTER EXTENSION idem_keys UPDATE in this database (see docs/operations.md)."),
    )
}

/// 55000: a second finish that would change the stored answer.
#[track_caller]
pub fn already_finished_differently() -> ! {
    raise!(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "idempotency key is already finished with a different answer".to_string(),
        None,
        Some("A finished key's answer never changes. Finishing again with the same answer is a no-op."),
    )
}
