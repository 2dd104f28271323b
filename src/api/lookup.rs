//! `idem_lookup`: read a key without claiming it. STABLE and read-only, so it also works on a hot standby.

use crate::api::claim::seconds_until;
use crate::args;
use crate::direct::row::{Answer, Checkpoint};
use crate::result::{Fields, Outcome};
use crate::store::{self, Stmt};
use pgrx::prelude::*;

/// `replay` with the stored answer, `in_progress` (retry_after 0 once the lease has ended), or NULL when the
/// key is unknown or expired. Never returns the token.
#[pg_extern(stable, parallel_safe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_lookup(
    scope: Option<&str>,
    key: Option<&str>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> Option<pgrx::composite_type!('static, "idem_result")> {
    let (scope, key) = args::scope_and_key("idem_lookup", scope, key);
    let now = store::clock_now();
    let params = [
        store::text(scope),
        store::text(key),
        store::timestamptz(now),
    ];
    let fields = store::with_spi(|client| {
        let table = store::run(client, Stmt::Lookup, &params);
        if table.is_empty() {
            return None;
        }
        let attempt: i32 = store::value(&table, 1).unwrap_or_default();
        let finished: bool = store::value(&table, 2).unwrap_or(false);
        let created_at = store::timestamp(&table, 8).unwrap_or_default();
        if finished {
            let mut fields = Fields::new(Outcome::Replay, attempt, created_at);
            fields.answer = Answer {
                status_code: store::value(&table, 4),
                response: store::varlena(&table, 5),
                response_bytes: store::varlena(&table, 6),
                headers: store::varlena(&table, 7),
            };
            Some(fields)
        } else {
            let mut fields = Fields::new(Outcome::InProgress, attempt, created_at);
            let lease_ends_at = store::timestamp(&table, 3).unwrap_or(now);
            fields.retry_after = Some(seconds_until(lease_ends_at, now));
            fields.checkpoint = Checkpoint {
                point: store::varlena(&table, 9),
                state: store::varlena(&table, 10),
            };
            Some(fields)
        }
    })?;
    Some(fields.into_tuple(fcinfo))
}
