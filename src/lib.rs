//! idem_keys: Stripe-grade idempotency keys for PostgreSQL, from plain SQL.
//!
//! The DDL lives in `sql/`; each concern has its module. From the top down (a module uses only those
//! below it, so there are no circles):
//! - `api`: the SQL verbs; `sweeper`: the optional background worker that sweeps.
//! - `args`: input checks; `tenant`: tenant binding; `result`: the idem_result row.
//! - `pending`: the write-once claim, a claim in a transaction block written once, with its answer.
//! - `direct`: the READ COMMITTED hot path of claim and finish, without SPI; `store`: the verbs' statements
//!   through SPI; `replicated`: no replay a failover can take away; `key_lock`: an open transaction's
//!   claim, told without waiting on it; `sweep_stats`: what the sweeps did, in shared memory, for
//!   `idem_stats()`.
//! - `key_row`: a key's row as both paths hand it to the verbs; `fingerprint` (with `jsonb_text`, a
//!   request's text from its binary form); `catalog`: the extension's schema and objects by OID, and the
//!   pinned search_path.
//! - `compat`: the only code that differs between PostgreSQL releases; `guc`: the settings; `error`: every
//!   error the extension raises.

use pgrx::prelude::*;

mod api;
mod args;
mod catalog;
mod citus;
mod compat;
mod direct;
mod error;
mod fingerprint;
mod guc;
mod key_lock;
mod key_row;
mod pending;
mod replicated;
mod result;
mod store;
mod sweep_stats;
mod sweeper;
mod tenant;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

pgrx::pg_module_magic!();

extension_sql_file!("../sql/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // pg_upgrade loads libraries only to check them; defining settings then would be noise.
    if unsafe { pg_sys::IsBinaryUpgrade } {
        return;
    }
    guc::init();
    // Shared memory and background workers can only be set up while the postmaster preloads us.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        sweep_stats::init();
        replicated::init();
        sweeper::worker::register();
    }
}

/// Hooks the pgrx test harness calls: no setup, and the server settings every `cargo pgrx test` cluster gets.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["timezone = 'UTC'"]
    }
}
