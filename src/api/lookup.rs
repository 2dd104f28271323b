//! `idem_lookup`: read a key without claiming it. STABLE and read-only, so it also works on a hot standby.

use crate::api::claim::seconds_until;
use crate::args;
use crate::direct;
use crate::key_row::{Answer, Checkpoint, KeyRow};
use crate::result::{Fields, IdemResult, Outcome};
use crate::store::{self, Stmt};
use pgrx::prelude::*;

/// `replay` with the stored answer, `in_progress` (retry_after 0 once the lease has ended), or NULL when the
/// key is unknown or expired. Never returns the token. PARALLEL RESTRICTED, not SAFE: a claim this transaction
/// has not written yet (src/pending.rs) lives in this backend's memory, which a parallel worker cannot see.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(stable, parallel_restricted, security_definer, requires = ["bootstrap"])]
fn idem_lookup(
    scope: Option<&str>,
    key: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<IdemResult> {
    let (scope, key) = args::scope_and_key("idem_lookup", scope, key);
    let now = store::clock_now();
    // SAFETY: a plain read of the backend's transaction state. (On a table Citus distributes, finding the
    // scope's shard reads Citus's metadata and takes its lock, neither of which a parallel worker may do:
    // outside a parallel query the direct read finds the shard when it is on this node.)
    let parallel = unsafe { pg_sys::IsInParallelMode() }
        && !crate::catalog::names().is_some_and(|names| names.distributed);
    // A claim this transaction made without writing it yet (src/pending.rs) is this transaction's row.
    let unwritten = crate::pending::row(scope, key);
    let read_directly = unwritten.is_none() && (parallel || direct::applies_to_reads());
    let row = match unwritten {
        Some(row) => row,
        None => read_directly
            .then(|| direct::lookup(scope, key, parallel))
            .flatten()
            .unwrap_or_else(|| read(scope, key, now))?,
    };
    // The SQL statement's own condition, for the direct read: an answer past its retention is gone.
    if row.finished && row.expires_at.is_none_or(|expires_at| expires_at <= now) {
        return None;
    }
    let fields = if row.finished {
        // As for idem_claim's replay: only an answer a failover cannot take away.
        crate::replicated::await_confirmed();
        let mut fields = Fields::new(Outcome::Replay, row.attempt, row.created_at);
        fields.answer = row.answer;
        fields
    } else {
        let mut fields = Fields::new(Outcome::InProgress, row.attempt, row.created_at);
        let lease_ends_at = row.lease_ends_at.unwrap_or(now);
        fields.retry_after = Some(seconds_until(lease_ends_at, now));
        fields.checkpoint = row.checkpoint;
        fields
    };
    Some(fields.into_tuple(fcinfo))
}

/// The key's row, unless unknown or expired, by the SQL statement.
fn read(scope: &str, key: &str, now: i64) -> Option<KeyRow> {
    let params = [
        store::text(scope),
        store::text(key),
        store::timestamptz(now),
    ];
    store::with_spi(|client| {
        let table = store::run(client, Stmt::Lookup, &params);
        if table.is_empty() {
            return None;
        }
        Some(KeyRow {
            inserted: false,
            token: 0,
            attempt: store::value(&table, 1).unwrap_or_default(),
            same_request: false,
            finished: store::value(&table, 2).unwrap_or(false),
            lease_ends_at: store::timestamp(&table, 3),
            expires_at: store::timestamp(&table, 11),
            answer: Answer {
                status_code: store::value(&table, 4),
                response: store::varlena(&table, 5),
                response_bytes: store::varlena(&table, 6),
                headers: store::varlena(&table, 7),
            },
            created_at: store::timestamp(&table, 8).unwrap_or_default(),
            checkpoint: Checkpoint {
                point: store::varlena(&table, 9),
                state: store::varlena(&table, 10),
            },
        })
    })
}
