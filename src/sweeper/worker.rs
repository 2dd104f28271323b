//! The optional sweeper background workers (`shared_preload_libraries = 'idem_keys'`).
//!
//! A background worker connects to one database for life, so a launcher (no database) starts one
//! sweeper per name in `idem_keys.sweep_databases` and keeps that set in line with the settings on every
//! reload. Each sweeper wakes every `idem_keys.sweep_interval`, deletes one batch per transaction until a
//! batch comes back short, rests `idem_keys.sweep_delay` between batches and checks for shutdown there,
//! so a backlog of millions never becomes one long transaction and SIGTERM ends it within a batch. Errors
//! are caught per batch, logged, counted in `idem_stats()`, and retried at the next interval; the worker
//! itself never dies of them.
//!
//! Both start only after recovery, so a hot standby runs none of this until it is promoted.

use super::stats;
use crate::{guc, store};
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
    DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// The launcher's wake-up period when nothing signals it: how soon a sweeper that died is replaced.
const LAUNCHER_TICK: Duration = Duration::from_secs(5);
/// `bgw_extra` holds the database name; PostgreSQL names are at most 63 bytes.
const MAX_DATABASE_NAME: usize = 63;

/// Registers the launcher; called from `_PG_init` while shared_preload_libraries is processed.
pub fn register() {
    BackgroundWorkerBuilder::new("idem_keys launcher")
        .set_function("idem_keys_launcher_main")
        .set_library("idem_keys")
        // A connection to no database (like the logical replication launcher): without the flag a worker
        // ignores SIGUSR1, and with it the postmaster's "your sweeper stopped" notice would never arrive.
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        // If it dies anyway (a crash restart, kill -9), the postmaster starts it again.
        .set_restart_time(Some(Duration::from_secs(1)))
        .load();
}

struct Sweeper {
    database: String,
    handle: Option<DynamicBackgroundWorker>,
    started: Instant,
}

impl Sweeper {
    fn running(&self) -> bool {
        match &self.handle {
            Some(handle) => matches!(
                handle.pid(),
                Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted)
            ),
            None => false,
        }
    }

    fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            // Ends between two batches; waiting keeps two sweepers of one database from overlapping.
            let _ = handle.terminate().wait_for_shutdown();
        }
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idem_keys_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut sweepers: Vec<Sweeper> = Vec::new();
    loop {
        let wanted = if guc::sweep_enabled() {
            guc::sweep_databases()
        } else {
            Vec::new()
        };
        let (keep, unwanted): (Vec<Sweeper>, Vec<Sweeper>) = sweepers
            .into_iter()
            .partition(|s| wanted.contains(&s.database));
        unwanted.into_iter().for_each(Sweeper::stop);
        sweepers = keep;
        let retry_after = Duration::from_millis(guc::sweep_interval_millis());
        for database in wanted {
            match sweepers.iter_mut().find(|s| s.database == database) {
                Some(s) if s.running() => {}
                // Died (e.g. its database is gone): try again after one interval, not in a tight loop.
                Some(s) if s.started.elapsed() < retry_after => {}
                Some(s) => *s = start_sweeper(database),
                None => sweepers.push(start_sweeper(database)),
            }
        }
        if !wait_applying_reload(LAUNCHER_TICK) {
            break;
        }
    }
    sweepers.into_iter().for_each(Sweeper::stop);
}

fn start_sweeper(database: String) -> Sweeper {
    let started = Instant::now();
    if database.len() > MAX_DATABASE_NAME {
        log!("idem_keys launcher: ignoring database name longer than {MAX_DATABASE_NAME} bytes in idem_keys.sweep_databases");
        return Sweeper {
            database,
            handle: None,
            started,
        };
    }
    let handle = BackgroundWorkerBuilder::new(&format!("idem_keys sweeper {database}"))
        .set_type("idem_keys sweeper")
        .set_function("idem_keys_sweeper_main")
        .set_library("idem_keys")
        .enable_spi_access()
        .set_extra(&database)
        // SAFETY: this process's pid, so the postmaster tells us when the sweeper starts and stops.
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic();
    if handle.is_err() {
        log!("idem_keys launcher: could not start the sweeper for database \"{database}\" (max_worker_processes reached?)");
    }
    Sweeper {
        database,
        handle: handle.ok(),
        started,
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idem_keys_sweeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = BackgroundWorker::get_extra().to_string();
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    let mut installed = None;
    loop {
        let pass_started = store::clock_now();
        let now_installed = sweep_database(&database);
        if now_installed != installed {
            // One line per change, at DEBUG1: a database without the extension is a normal, quiet case.
            if now_installed == Some(false) {
                debug1!(
                    "idem_keys sweeper: extension not installed in database \"{database}\"; idle"
                );
            }
            installed = now_installed;
        }
        // Sleep until one interval after this pass began; a reload may shorten or lengthen that.
        loop {
            if shutdown_requested() {
                return;
            }
            let due = pass_started.saturating_add(guc::sweep_interval_millis() as i64 * 1000);
            let remaining = due - store::clock_now();
            if remaining <= 0 {
                break;
            }
            if !wait_applying_reload(Duration::from_micros(remaining as u64)) {
                return;
            }
        }
    }
}

/// Sleeps until `timeout` or a signal, then applies a reload if one arrived. False when the worker is
/// asked to stop.
fn wait_applying_reload(timeout: Duration) -> bool {
    if !BackgroundWorker::wait_latch(Some(timeout)) {
        return false;
    }
    if BackgroundWorker::sighup_received() {
        // SAFETY: the documented way for a worker to apply a reload.
        unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
    }
    true
}

/// `idem_keys.sweep_delay` between two batches. False when the worker is asked to stop.
fn rest_between_batches() -> bool {
    let delay = guc::sweep_delay();
    delay.is_zero() || wait_applying_reload(delay)
}

fn shutdown_requested() -> bool {
    // SAFETY: a flag set by the SIGTERM handler; read only.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ShutdownRequestPending) != 0 }
}

/// One sweep of this database, batch by batch. Some(false) when the extension is not installed, None
/// when a batch failed (logged and counted; the next interval tries again).
fn sweep_database(database: &str) -> Option<bool> {
    let mut sweep = crate::api::Sweep::default();
    let mut first = true;
    while !shutdown_requested() {
        match sweep_one_batch(sweep, std::mem::take(&mut first)) {
            Ok(None) => return Some(false),
            Ok(Some((next, full))) => {
                sweep = next;
                if !full || !rest_between_batches() {
                    break;
                }
            }
            Err(message) => {
                log!("idem_keys sweeper: sweeping database \"{database}\" failed, retrying in idem_keys.sweep_interval: {message}");
                stats::record_error();
                return None;
            }
        }
    }
    sweep.record();
    Some(true)
}

/// One batch of `sweep` in its own transaction: the sweep after it, and whether the batch came back full.
/// The first batch of a pass finds the schema the extension lives in and points this session's search_path
/// there (Ok(None) when the extension is not installed), so the later batches run no catalog query: one per
/// sweep, not one per batch.
fn sweep_one_batch(
    mut sweep: crate::api::Sweep,
    first: bool,
) -> Result<Option<(crate::api::Sweep, bool)>, String> {
    PgTryBuilder::new(move || {
        Ok(BackgroundWorker::transaction(move || {
            if first {
                let schema_path: Result<Option<String>, _> = Spi::get_one(
                    "SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' || pg_catalog.quote_ident(n.nspname), false)
                       FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
                      WHERE e.extname = 'idem_keys'",
                );
                if !matches!(schema_path, Ok(Some(_))) {
                    return None;
                }
            }
            let full = sweep.batch(guc::sweep_batch_size());
            Some((sweep, full))
        }))
    })
    .catch_others(|error| {
        // SAFETY: we are in a worker's own transaction, which the error left aborted; roll it back here.
        unsafe { pg_sys::AbortCurrentTransaction() };
        Err(match error {
            CaughtError::PostgresError(report) | CaughtError::ErrorReport(report) => report.message().to_string(),
            CaughtError::RustPanic { ereport, .. } => ereport.message().to_string(),
        })
    })
    .execute()
}
