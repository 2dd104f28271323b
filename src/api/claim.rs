//! `idem_claim`: the single-winner insert, replay of a finished answer, the lease and the fencing token, and
//! the optional server-side wait for an owner that is still working.

use crate::args::{self, RawJsonb};
use crate::direct::{self, Writer};
use crate::fingerprint::{self, Fingerprint};
use crate::key_lock;
use crate::key_row::KeyRow;
use crate::pending::{self, Deferred};
use crate::result::{Fields, IdemResult, Outcome};
use crate::store::{self, Stmt};
use pgrx::datum::Interval;
use pgrx::prelude::*;

/// Claim an idempotency key for a JSON request.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(name = "idem_claim", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
fn idem_claim_jsonb_wait(
    scope: Option<&str>,
    key: Option<&str>,
    request: Option<RawJsonb>,
    lease: default!(Option<Interval>, "NULL"),
    wait: default!(Option<Interval>, "'0'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> IdemResult {
    args::writable("idem_claim");
    let (scope, key) = args::scope_and_key("idem_claim", scope, key);
    let request = args::require(request, "idem_claim", "request");
    let fingerprint = request.with_text(fingerprint::of_jsonb_text);
    claim(scope, key, &fingerprint, lease, wait).into_tuple(fcinfo)
}

/// Claim an idempotency key for a raw (bytea) request body.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(name = "idem_claim", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
fn idem_claim_bytea_wait(
    scope: Option<&str>,
    key: Option<&str>,
    request: Option<&[u8]>,
    lease: default!(Option<Interval>, "NULL"),
    wait: default!(Option<Interval>, "'0'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> IdemResult {
    args::writable("idem_claim");
    let (scope, key) = args::scope_and_key("idem_claim", scope, key);
    let request = args::require(request, "idem_claim", "request");
    claim(scope, key, &fingerprint::of_bytes(request), lease, wait).into_tuple(fcinfo)
}

/// Claim an idempotency key for a request's bytes, which the caller says are JSON or not: one call for any
/// body. JSON that parses is fingerprinted as the jsonb form fingerprints it; anything else (not JSON, not
/// UTF-8, or `is_json` false) as the bytea form does.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(name = "idem_claim", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
fn idem_claim_body_wait(
    scope: Option<&str>,
    key: Option<&str>,
    request: Option<&[u8]>,
    is_json: Option<bool>,
    lease: default!(Option<Interval>, "NULL"),
    wait: default!(Option<Interval>, "'0'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> IdemResult {
    args::writable("idem_claim");
    let (scope, key) = args::scope_and_key("idem_claim", scope, key);
    let request = args::require(request, "idem_claim", "request");
    let is_json = args::require(is_json, "idem_claim", "is_json");
    let fingerprint = is_json
        .then(|| fingerprint_of_json_bytes(request))
        .flatten()
        .unwrap_or_else(|| fingerprint::of_bytes(request));
    claim(scope, key, &fingerprint, lease, wait).into_tuple(fcinfo)
}

/// Claim an idempotency key for an HTTP request, fingerprinted as the middlewares fingerprint one
/// (contract/sql.json), in one call: with `is_json`, a body that is JSON gets the fingerprint of
/// `jsonb_build_object('method', method, 'target', target, 'body', request::jsonb)`, and any other request that
/// of the bytes `method || ' ' || target || E'\n' || request`, exactly as the two statements a middleware sent
/// before, the second after the first failed to parse the body.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(name = "idem_claim", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[allow(clippy::too_many_arguments)] // the SQL function's parameters
fn idem_claim_http_wait(
    scope: Option<&str>,
    key: Option<&str>,
    method: Option<&str>,
    target: Option<&str>,
    request: Option<&[u8]>,
    is_json: Option<bool>,
    lease: default!(Option<Interval>, "NULL"),
    wait: default!(Option<Interval>, "'0'"),
    fcinfo: pg_sys::FunctionCallInfo,
) -> IdemResult {
    args::writable("idem_claim");
    let (scope, key) = args::scope_and_key("idem_claim", scope, key);
    let method = args::require(method, "idem_claim", "method");
    let target = args::require(target, "idem_claim", "target");
    let request = args::require(request, "idem_claim", "request");
    let is_json = args::require(is_json, "idem_claim", "is_json");
    let fingerprint = is_json
        .then(|| fingerprint_of_json_request(method, target, request))
        .flatten()
        .unwrap_or_else(|| {
            let line = format!("{method} {target}\n");
            fingerprint::of_bytes(&[line.as_bytes(), request].concat())
        });
    claim(scope, key, &fingerprint, lease, wait).into_tuple(fcinfo)
}

/// The jsonb form's fingerprint of `bytes`, if they are JSON text PostgreSQL's jsonb accepts.
fn fingerprint_of_json_bytes(bytes: &[u8]) -> Option<Fingerprint> {
    json_value(bytes).map(|value| value.with_text(fingerprint::of_jsonb_text))
}

/// The fingerprint of the object {method, target, body}, if the body is JSON jsonb accepts. The body is
/// parsed alone first, so that no body can reach out into the object around it (`1, "method": "GET"` is not
/// JSON, and stays bytes); the object is then parsed from the body's canonical text.
fn fingerprint_of_json_request(method: &str, target: &str, body: &[u8]) -> Option<Fingerprint> {
    let body = json_value(body)?.with_text(|text| String::from_utf8(text.to_vec()).ok())?;
    let object = format!(
        "{{\"method\": {}, \"target\": {}, \"body\": {body}}}",
        serde_json::to_string(method).ok()?,
        serde_json::to_string(target).ok()?,
    );
    fingerprint_of_json_bytes(object.as_bytes())
}

/// `bytes` as a jsonb value, if they are JSON text PostgreSQL's jsonb accepts: UTF-8 without NUL (on a
/// database whose encoding is not UTF8: ASCII), parsed by `jsonb_in`.
fn json_value(bytes: &[u8]) -> Option<RawJsonb> {
    std::str::from_utf8(bytes).ok()?;
    // SAFETY: a plain read of the database's encoding.
    let utf8 = unsafe { pg_sys::GetDatabaseEncoding() } == pg_sys::pg_enc::PG_UTF8 as i32;
    if !utf8 && !bytes.is_ascii() {
        return None;
    }
    let text = std::ffi::CString::new(bytes).ok()?;
    crate::compat::jsonb_parsed(&text).map(RawJsonb::made)
}

/// The 0.1.0 entry points (no `wait`), reached only from a catalog still at 0.1.0: this library's statements
/// need the 0.2.0 table, so say exactly what to do instead of failing on a missing column. No SQL is
/// generated for them.
#[pg_extern(sql = false)]
fn idem_claim_jsonb() {
    crate::error::catalog_needs_update("0.1.0")
}

#[pg_extern(sql = false)]
fn idem_claim_bytea() {
    crate::error::catalog_needs_update("0.1.0")
}

/// First re-check of a busy key after this long, doubling up to `POLL_MAX_MICROS`: a short provider call is
/// picked up within milliseconds, a long one costs at most ten cheap index reads a second.
const POLL_FIRST_MICROS: i64 = 10_000;
const POLL_MAX_MICROS: i64 = 100_000;

/// Rounds of the dirty read before handing over to SPI: each follows a concurrent commit on the same key, so
/// more than two is already unusual.
const MAX_ROUNDS: usize = 8;

fn claim(
    scope: &str,
    key: &str,
    fingerprint: &Fingerprint,
    lease: Option<Interval>,
    wait: Option<Interval>,
) -> Fields {
    let lease_micros = args::duration_micros("lease", lease, crate::guc::lease_micros);
    // A claim of a key this transaction claimed without writing: write it, and answer as for any key this
    // transaction holds.
    pending::write_key(scope, key);
    let mut now = store::clock_now();
    let deadline = now.saturating_add(args::wait_micros(wait));
    // On a table Citus distributes, a read first and a plain insert after (`Start::ReadThenInsert`): Citus
    // runs single-statement reads and writes of one scope straight on the shard, but plans the `Claim`
    // statement's CTE in steps through intermediate results (a replay 8 times slower, docs/scale-out.md).
    let citus = crate::catalog::names().is_some_and(|names| names.distributed);
    let mut start = if citus {
        Start::ReadThenInsert
    } else {
        Start::Claim
    };
    let mut poll = POLL_FIRST_MICROS;
    loop {
        match attempt(scope, key, fingerprint, now, lease_micros, start, citus) {
            Attempt::Done(fields) => {
                // A stored answer (or a mismatch with one) is final for the client: serve it only once a
                // failover can no longer take it away.
                if matches!(fields.outcome, Outcome::Replay | Outcome::Mismatch) {
                    crate::replicated::await_confirmed();
                }
                return fields;
            }
            Attempt::Busy(fields, lease_ends_at) => {
                if now >= deadline || !snapshot_moves() {
                    return fields;
                }
                // Wake at the deadline, at the lease's end (to recover the key), or at the next poll.
                store::sleep_until(deadline.min(lease_ends_at).min(now.saturating_add(poll)));
                poll = (poll * 2).min(POLL_MAX_MICROS);
                // Polls read first: a key that is still busy costs no insert attempt and no token.
                start = Start::Poll;
                now = store::clock_now();
            }
        }
    }
}

/// How a pass of the claim begins.
#[derive(Clone, Copy)]
enum Start {
    /// With `Stmt::Claim`: insert, or read the row the insert conflicted with.
    Claim,
    /// With a read, then (the key busy) the insert, then a final read: on Citus, where `Claim` runs slowly
    /// (see `claim`). The insert's conflict check waits for an owner whose finish or release is committing
    /// right now, as `Claim` does, so a retry then answers from what it committed.
    ReadThenInsert,
    /// With a read alone: a poll of a busy key, at no token's cost.
    Poll,
}

enum Attempt {
    Done(Fields),
    /// In progress under another owner whose lease ends at the given time (never, as far as we know, for a
    /// key held by another open transaction: its row is not visible yet).
    Busy(Fields, i64),
}

/// `in_progress` for a key that another open transaction claimed, took over or is claiming (the key lock):
/// its row is not visible, so attempt and created_at are unknown; retry in a second. Polled like any busy key,
/// so never waited on beyond `wait`.
fn held() -> Attempt {
    let mut fields = Fields::unknown(Outcome::InProgress);
    fields.retry_after = Some(1);
    Attempt::Busy(fields, i64::MAX)
}

/// The answer to a claim that just took the key.
fn claimed(row: KeyRow, now: i64) -> Attempt {
    match decide(row, now) {
        Decision::Answer(fields) => Attempt::Done(fields),
        _ => unreachable!("a fresh claim is an answer"),
    }
}

/// One pass of the claim state machine, in one SPI connection, with no lock or snapshot kept afterwards.
fn attempt(
    scope: &str,
    key: &str,
    fingerprint: &Fingerprint,
    now: i64,
    lease_micros: i64,
    start: Start,
    citus: bool,
) -> Attempt {
    let mut first = match start {
        Start::Claim => Stmt::Claim,
        Start::ReadThenInsert | Start::Poll => Stmt::Reread,
    };
    let mut confirm_busy = matches!(start, Start::ReadThenInsert);
    let lease_ends_at = now.saturating_add(lease_micros);
    if direct::applies_to_reads() {
        // A dirty read first (src/direct/dirty.rs): it serves a retry's replay, answers a key another open
        // transaction is claiming at once, and lets a new key be inserted without any lock. Each further
        // round follows a concurrent commit on the same key.
        for _ in 0..MAX_ROUNDS {
            let Some(seen) = direct::probe(scope, key, fingerprint) else {
                break; // the read declined: SPI, under the key lock
            };
            let decided = seen.row.map(|row| decide(row, now));
            if let Some(Decision::Answer(fields)) = decided {
                // A stored answer (or a mismatch) is served as committed, as an MVCC read would.
                return Attempt::Done(fields);
            }
            match seen.writer {
                Writer::Inserting => return held(),
                // A takeover keeps the key lock; a finish, release or sweep that is committing does not, and
                // is waited for, so that this claim answers from what it commits.
                Writer::Changing(xid) => {
                    if key_lock::held_elsewhere(scope, key) {
                        return held();
                    }
                    direct::wait_for(xid);
                    continue;
                }
                Writer::Nobody => {}
            }
            match decided {
                Some(Decision::Busy(fields, lease_ends_at)) => {
                    return Attempt::Busy(fields, lease_ends_at)
                }
                Some(Decision::TakeOver) => {
                    first = Stmt::Takeover; // rare: on SPI, under the key lock
                    break;
                }
                Some(Decision::Answer(_)) => unreachable!("answered above"),
                // A read-only transaction: the SQL statement raises the error its caller expects.
                None if !direct::applies() => break,
                // Nobody has written the key; a claim another transaction made without writing it
                // (src/pending.rs) is known by its key lock alone, which a deferred claim takes (`Held`)
                // and an insert checks before it writes.
                None => {
                    let deferred = pending::applies(citus)
                        .then(|| pending::claim(scope, key, fingerprint, now, lease_ends_at));
                    match deferred {
                        Some(Deferred::Claimed(row)) => return claimed(row, now),
                        Some(Deferred::Held) => return held(),
                        Some(Deferred::Raced) => continue,
                        // `hold` found the lock free a moment ago: no need to look again.
                        Some(Deferred::NotDeferred) => {}
                        None if key_lock::held_elsewhere(scope, key) => return held(),
                        None => {}
                    }
                    // Once the row is in, the key lock again: a claim that took it meanwhile read the key
                    // before this row was there, and owns it.
                    let keep = || !key_lock::held_elsewhere(scope, key);
                    match direct::claim(scope, key, fingerprint, now, lease_ends_at, keep) {
                        Some(direct::Inserted::Claimed(row)) => return claimed(row, now),
                        Some(direct::Inserted::Conflict) => continue,
                        Some(direct::Inserted::Refused) => return held(),
                        None => break,
                    }
                }
            }
        }
    }
    let mut params = [
        store::text(scope),
        store::text(key),
        store::bytes(fingerprint),
        store::timestamptz(now),
        store::timestamptz(lease_ends_at),
        store::int8(0), // a takeover's new token, drawn just before it
    ];
    store::with_spi(|client| {
        let mut stmt = first;
        // Claim and Takeover write: the key lock first (taking it again costs nothing), the mark of a key this
        // transaction writes where no dirty read tells (src/key_lock.rs). While an open transaction holds it, a
        // finished answer is still served, so read before answering `in_progress`.
        let (mut locked, mut read) = (false, false);
        loop {
            if !locked && !matches!(stmt, Stmt::Reread) {
                if key_lock::hold(scope, key).free() {
                    locked = true;
                } else if !read {
                    stmt = Stmt::Reread;
                } else {
                    return held();
                }
            }
            read |= matches!(stmt, Stmt::Reread);
            if matches!(stmt, Stmt::Takeover) {
                let drawn = store::run(client, Stmt::NextToken, &[]);
                params[5] = store::int8(store::value::<i64>(&drawn, 1).unwrap_or_default());
            }
            let row = store::first_key_row(&store::run(client, stmt, &params));
            match row.map(|row| decide(row, now)) {
                Some(Decision::Answer(fields)) => return Attempt::Done(fields),
                // `Claim` read the row with the snapshot it started with; if the owner finished (or released)
                // while the insert waited on the row, only a fresh read sees it. Confirm before answering 409.
                Some(Decision::Busy(_, _)) if matches!(stmt, Stmt::Claim | Stmt::Insert) => {
                    stmt = Stmt::Reread
                }
                Some(Decision::Busy(fields, lease_ends_at)) if confirm_busy => {
                    confirm_busy = false;
                    // Another open transaction holds the key lock (claiming or taking the key over): as on one server,
                    // this read is the answer.
                    if !locked && !key_lock::hold(scope, key).free() {
                        return Attempt::Busy(fields, lease_ends_at);
                    }
                    locked = true;
                    stmt = Stmt::Insert
                }
                Some(Decision::Busy(fields, lease_ends_at)) => {
                    return Attempt::Busy(fields, lease_ends_at)
                }
                // Expired answer or dead owner: try to take the key over; a racing claimer may win instead.
                Some(Decision::TakeOver) => stmt = Stmt::Takeover,
                // The row we conflicted with was committed after our snapshot, or deleted (release, sweep)
                // since: read again with a fresh snapshot, or insert again if it is gone.
                None if matches!(stmt, Stmt::Claim | Stmt::Insert) => stmt = Stmt::Reread,
                None if citus => stmt = Stmt::Insert,
                None => stmt = Stmt::Claim,
            }
        }
    })
}

enum Decision {
    Answer(Fields),
    Busy(Fields, i64),
    TakeOver,
}

/// What a claim at `now` answers, given the key's row.
fn decide(row: KeyRow, now: i64) -> Decision {
    if row.inserted {
        // Fresh insert, or a takeover (whose RETURNING also reports inserted = true).
        let outcome = if row.attempt > 1 {
            Outcome::Recovered
        } else {
            Outcome::Claimed
        };
        let mut fields = Fields::new(outcome, row.attempt, row.created_at);
        fields.token = Some(row.token);
        // NULL for a fresh claim and for an expired answer taken over; the dead owner's for a recovery.
        fields.checkpoint = row.checkpoint;
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
            fields.checkpoint = row.checkpoint;
            Decision::Busy(fields, lease_ends_at)
        }
        _ => Decision::TakeOver,
    }
}

/// Under REPEATABLE READ and SERIALIZABLE every read sees the transaction's first snapshot, so a wait could
/// never see the owner finish: answer `in_progress` at once instead of sleeping for nothing.
fn snapshot_moves() -> bool {
    // SAFETY: a plain read of the backend's current isolation level.
    unsafe { pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// Whole seconds from `now` until `then`, rounded up.
pub fn seconds_until(then: i64, now: i64) -> i32 {
    let micros = (then - now).max(0);
    ((micros + 999_999) / 1_000_000).min(i32::MAX as i64) as i32
}
