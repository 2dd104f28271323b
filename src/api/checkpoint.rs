//! `idem_checkpoint`: the owner records how far a multi-step request got, so whoever recovers the key after
//! a crash resumes there instead of starting over (the recovery points of Stripe-style atomic phases).

use crate::args::{self, RawJsonb};
use crate::error;
use crate::store::{self, Stmt};
use pgrx::prelude::*;

/// Record recovery point `point` (and optional `state`) for a key the token owns. Overwrites the previous
/// checkpoint; does not extend the lease.
#[pg_extern(volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_checkpoint(
    scope: Option<&str>,
    key: Option<&str>,
    token: Option<i64>,
    point: Option<&str>,
    state: default!(Option<RawJsonb>, "NULL"),
) {
    args::writable("idem_checkpoint");
    let (scope, key) = args::scope_and_key("idem_checkpoint", scope, key);
    let token = args::require(token, "idem_checkpoint", "token");
    let point = args::checkpoint_name(point);
    if let Some(state) = state {
        args::stored_size("state", state.size());
    }
    // A claim of this transaction not written yet: write it, then record the checkpoint on it.
    crate::pending::write_key(scope, key);
    store::with_spi(|client| {
        let params = [
            store::text(scope),
            store::text(key),
            store::int8(token),
            store::text(point),
            store::raw(state.map(RawJsonb::datum), pg_sys::JSONBOID),
        ];
        if store::run(client, Stmt::Checkpoint, &params).len() == 1 {
            return;
        }
        match store::live_owner(client, scope, key) {
            None => error::unknown_key("idem_checkpoint"),
            Some((owner, _)) if owner != token => error::token_not_owner(token),
            // Same token, so the key is finished (the update only skips finished keys).
            Some(_) => error::checkpoint_after_finish(),
        }
    })
}
