//! `idem_claim`: the single-winner insert, replay of a finished answer, the lease and the fencing token.

use crate::args::{self, RawJsonb};
use crate::fingerprint::{self, Fingerprint};
use crate::result::{Fields, Outcome};
use crate::store::{self, KeyRow, Stmt};
use pgrx::datum::Interval;
use pgrx::prelude::*;

/// Claim an idempotency key for a JSON request.
#[pg_extern(name = "idem_claim", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_claim_jsonb(
    scope: Option<&str>,
    key: Option<&str>,
    request: Option<RawJsonb>,
    lease: default!(Option<Interval>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> pgrx::composite_type!('static, "idem_result") {
    let (scope, key) = args::scope_and_key("idem_claim", scope, key);
    let request = args::require(request, "idem_claim", "request");
    let fingerprint = request.with_text(fingerprint::of_jsonb_text);
    claim(scope, key, &fingerprint, lease).into_tuple(fcinfo)
}

/// Claim an idempotency key for a raw (bytea) request body.
#[pg_extern(name = "idem_claim", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_claim_bytea(
    scope: Option<&str>,
    key: Option<&str>,
    request: Option<&[u8]>,
    lease: default!(Option<Interval>, "NULL"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> pgrx::composite_type!('static, "idem_result") {
    let (scope, key) = args::scope_and_key("idem_claim", scope, key);
    let request = args::require(request, "idem_claim", "request");
    claim(scope, key, &fingerprint::of_bytes(request), lease).into_tuple(fcinfo)
}

fn claim(scope: &str, key: &str, fingerprint: &Fingerprint, lease: Option<Interval>) -> Fields {
    let lease_micros = args::duration_micros("lease", lease, crate::guc::lease_micros);
    let now = store::clock_now();
    let lease_ends_at = now.saturating_add(lease_micros);
    let params = [
        store::text(scope),
        store::text(key),
        store::bytes(fingerprint),
        store::timestamptz(now),
        store::timestamptz(lease_ends_at),
    ];
    store::with_spi(|client| {
        let mut stmt = Stmt::Claim;
        loop {
            let row = store::first_key_row(&store::run(client, stmt, &params));
            match row.map(|row| decide(row, now)) {
                Some(Decision::Answer(fields)) => return fields,
                // Expired answer or dead owner: try to take the key over; a racing claimer may win instead.
                Some(Decision::TakeOver) => stmt = Stmt::Takeover,
                // The row we conflicted with was committed after our snapshot, or deleted (release, sweep)
                // since: read again with a fresh snapshot, or insert again if it is gone.
                None if matches!(stmt, Stmt::Claim) => stmt = Stmt::Reread,
                None => stmt = Stmt::Claim,
            }
        }
    })
}

enum Decision {
    Answer(Fields),
    TakeOver,
}

/// What a claim at `now` answers, given the key's row.
fn decide(row: KeyRow, now: i64) -> Decision {
    if row.inserted {
        // Fresh insert, or a takeover (whose RETURNING also reports inserted = true).
        let outcome = if row.attempt > 1 { Outcome::Recovered } else { Outcome::Claimed };
        let mut fields = Fields::new(outcome, row.attempt, row.created_at);
        fields.token = Some(row.token);
        return Decision::Answer(fields);
    }
    if row.finished {
        // A finished answer past its retention counts as absent, swept or not.
        if row.expires_at.is_some_and(|expires_at| expires_at <= now) {
            return Decision::TakeOver;
        }
        if !row.same_request {
            return Decision::Answer(Fields::new(Outcome::Mismatch, row.attempt, row.created_at));
        }
        let mut fields = Fields::new(Outcome::Replay, row.attempt, row.created_at);
        fields.answer = row.answer;
        return Decision::Answer(fields);
    }
    if !row.same_request {
        return Decision::Answer(Fields::new(Outcome::Mismatch, row.attempt, row.created_at));
    }
    match row.lease_ends_at {
        Some(lease_ends_at) if lease_ends_at > now => {
            let mut fields = Fields::new(Outcome::InProgress, row.attempt, row.created_at);
            fields.retry_after = Some(seconds_until(lease_ends_at, now).max(1));
            Decision::Answer(fields)
        }
        _ => Decision::TakeOver,
    }
}

/// Whole seconds from `now` until `then`, rounded up.
pub fn seconds_until(then: i64, now: i64) -> i32 {
    let micros = (then - now).max(0);
    ((micros + 999_999) / 1_000_000).min(i32::MAX as i64) as i32
}
