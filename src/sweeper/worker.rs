//! The optional sweeper background workers (`shared_preload_libraries = 'idem_keys'`).
//!
//! A launcher (connected to no database) keeps the schedule: every `idem_keys.sweep_interval` it looks up
//! each name in `idem_keys.sweep_databases` and starts a sweeper for one pass over that database. The
//! sweeper deletes one batch per transaction until a batch comes back short, rests `idem_keys.sweep_delay`
//! between batches and checks for shutdown there, then exits: a backlog of millions never becomes one long
//! transaction, SIGTERM ends a pass within a batch, and between passes no process holds the database, so it
//! can be dropped, renamed or copied as a template while it is swept. A name that is not (or no longer) a
//! database that accepts connections is reported once, at LOG, until it is one again. Errors are caught per
//! batch, logged, counted in `idem_stats()`, and retried at the next pass.
//!
//! Both start only after recovery, so a hot standby runs none of this until it is promoted.

use crate::guc;
use crate::sweep_stats;
use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
    DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use std::time::{Duration, Instant};

/// The launcher's longest sleep when nothing signals it.
const LAUNCHER_TICK: Duration = Duration::from_secs(5);
/// PostgreSQL names are at most 63 bytes.
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

/// One name of `idem_keys.sweep_databases`: its running pass, when the last one began, and whether its
/// absence was reported.
struct Database {
    name: String,
    pass: Option<DynamicBackgroundWorker>,
    last_pass: Option<Instant>,
    absence_reported: bool,
}

impl Database {
    fn new(name: String) -> Self {
        Database {
            name,
            pass: None,
            last_pass: None,
            absence_reported: false,
        }
    }

    fn sweeping(&self) -> bool {
        self.pass.as_ref().is_some_and(|pass| {
            matches!(
                pass.pid(),
                Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted)
            )
        })
    }

    /// When the next pass is due: one interval after the last one began.
    fn due_in(&self, interval: Duration) -> Duration {
        self.last_pass.map_or(Duration::ZERO, |began| {
            interval.saturating_sub(began.elapsed())
        })
    }

    /// Starts a pass if one is due and none runs.
    fn sweep_if_due(&mut self, interval: Duration) {
        if self.sweeping() || !self.due_in(interval).is_zero() {
            return;
        }
        self.last_pass = Some(Instant::now());
        match find_database(&self.name) {
            Ok(oid) => {
                self.absence_reported = false;
                self.pass = start_pass(oid, &self.name);
            }
            Err(why) => {
                if !std::mem::replace(&mut self.absence_reported, true) {
                    log!("idem_keys launcher: not sweeping \"{}\" named in idem_keys.sweep_databases: {why}; it is looked up again every idem_keys.sweep_interval", self.name);
                }
            }
        }
    }

    fn stop(mut self) {
        if let Some(pass) = self.pass.take() {
            // Ends between two batches; waiting keeps two passes over one database from overlapping.
            let _ = pass.terminate().wait_for_shutdown();
        }
    }
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idem_keys_launcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    let mut databases: Vec<Database> = Vec::new();
    loop {
        let wanted = if guc::sweep_enabled() {
            guc::sweep_databases()
        } else {
            Vec::new()
        };
        let (keep, unwanted): (Vec<Database>, Vec<Database>) = databases
            .into_iter()
            .partition(|d| wanted.contains(&d.name));
        unwanted.into_iter().for_each(Database::stop);
        databases = keep;
        for name in wanted {
            if !databases.iter().any(|d| d.name == name) {
                databases.push(Database::new(name));
            }
        }
        let interval = Duration::from_millis(guc::sweep_interval_millis());
        databases.iter_mut().for_each(|d| d.sweep_if_due(interval));
        // The postmaster wakes us when a pass ends (notify pid), a reload when the settings change.
        let next = databases.iter().map(|d| d.due_in(interval)).min();
        let sleep = next.map_or(LAUNCHER_TICK, |due| {
            due.clamp(Duration::from_millis(10), LAUNCHER_TICK)
        });
        if !wait_applying_reload(sleep) {
            break;
        }
    }
    databases.into_iter().for_each(Database::stop);
}

/// The OID of the database named `name`, if it exists and accepts connections; else why not.
fn find_database(name: &str) -> Result<pg_sys::Oid, &'static str> {
    if name.len() > MAX_DATABASE_NAME {
        return Err("longer than a database name can be");
    }
    let name = name.to_owned();
    // SAFETY: a heap scan of pg_database in the launcher's own transaction, as the autovacuum launcher's
    // get_database_list does: a process connected to no database may read shared catalogs, but not through
    // their indexes or the syscache, which would need pg_class. Each tuple is read before the next fetch.
    BackgroundWorker::transaction(move || unsafe {
        let catalog = pg_sys::table_open(pg_sys::DatabaseRelationId, pg_sys::AccessShareLock as _);
        let scan = pg_sys::table_beginscan_catalog(catalog, 0, std::ptr::null_mut());
        let mut found = Err("no such database");
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let database = &*(pg_sys::GETSTRUCT(tuple) as *const pg_sys::FormData_pg_database);
            if std::ffi::CStr::from_ptr(database.datname.data.as_ptr()).to_bytes()
                == name.as_bytes()
            {
                found = if database.datallowconn {
                    Ok(database.oid)
                } else {
                    Err("the database does not accept connections")
                };
                break;
            }
        }
        pg_sys::heap_endscan(scan);
        pg_sys::table_close(catalog, pg_sys::AccessShareLock as _);
        found
    })
}

/// `bgw_extra` carries "OID NAME": the sweeper connects by OID (a rename between lookup and start does not
/// matter) and names the database in its messages.
fn start_pass(oid: pg_sys::Oid, name: &str) -> Option<DynamicBackgroundWorker> {
    let pass = BackgroundWorkerBuilder::new(&format!("idem_keys sweeper {name}"))
        .set_type("idem_keys sweeper")
        .set_function("idem_keys_sweeper_main")
        .set_library("idem_keys")
        .enable_spi_access()
        .set_extra(&format!("{} {name}", u32::from(oid)))
        // SAFETY: this process's pid, so the postmaster tells us when the pass starts and ends.
        .set_notify_pid(unsafe { pg_sys::MyProcPid })
        .load_dynamic();
    if pass.is_err() {
        log!("idem_keys launcher: could not start the sweeper for database \"{name}\" (max_worker_processes reached?)");
    }
    pass.ok()
}

#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn idem_keys_sweeper_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let extra = BackgroundWorker::get_extra();
    let (oid, database) = extra.split_once(' ').unwrap_or((extra, ""));
    let oid = pg_sys::Oid::from(oid.parse::<u32>().unwrap_or(0));
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(oid), None);
    if sweep_database(database) == Some(false) {
        // At DEBUG1: a database without the extension is a normal, quiet case.
        debug1!("idem_keys sweeper: extension not installed in database \"{database}\"; nothing to sweep");
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
                sweep_stats::record_error();
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
