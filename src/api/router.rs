//! What a PL/Proxy router (idem_keys_proxy) runs of this library before it routes a call: the verbs' own
//! argument checks and tenant binding, on the router, where the caller is known (a partition only ever
//! sees the router's role). Not part of idem_keys' SQL: idem_keys_proxy declares it (`check_call`).

use crate::args;
use pgrx::prelude::*;

/// The verbs a router routes by key; any other name is a bug in idem_keys_proxy.
const KEYED_VERBS: [&str; 5] = [
    "idem_claim",
    "idem_finish",
    "idem_release",
    "idem_checkpoint",
    "idem_lookup",
];

/// Raises exactly what `function` on one node raises for this scope and key before it reads anything:
/// 22004 for a NULL, 22023 for a length, 42501 for a scope outside the caller's tenant.
#[pg_extern(sql = false)]
fn idem_keys_proxy_check_call(function: &str, scope: Option<&str>, key: Option<&str>) {
    if !KEYED_VERBS.contains(&function) {
        error!("idem_keys_proxy: check_call does not know the verb {function:?}");
    }
    args::scope_and_key(function, scope, key);
}
