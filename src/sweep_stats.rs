//! What the sweeps did, per database, kept in shared memory so `idem_stats()` can tell when the table was
//! last swept and how much went. Only with `shared_preload_libraries = 'idem_keys'` (shared memory is
//! reserved at server start); without it nothing is recorded and the columns are NULL. Resets at restart.

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::PGRXSharedMemory;
use std::sync::atomic::{AtomicBool, Ordering};

/// Databases tracked at once; a server sweeping more than this many databases stops recording new ones.
const SLOTS: usize = 64;

#[derive(Clone, Copy, Default)]
pub struct Slot {
    /// Database OID; 0 marks a free slot.
    database: u32,
    last_sweep_at: i64,
    last_removed: i64,
    total_removed: i64,
    sweeps: i64,
    errors: i64,
    last_error_at: i64,
    longest_batch_micros: i64,
}

#[derive(Clone, Copy)]
pub struct Table {
    slots: [Slot; SLOTS],
}

impl Default for Table {
    fn default() -> Self {
        Table {
            slots: [Slot::default(); SLOTS],
        }
    }
}

// SAFETY: plain old data, no pointers.
unsafe impl PGRXSharedMemory for Table {}

static TABLE: PgLwLock<Table> = unsafe { PgLwLock::new(c"idem_keys sweep stats") };

/// Set in the postmaster during preload and inherited by every forked backend.
static ATTACHED: AtomicBool = AtomicBool::new(false);

/// Reserves the shared memory; only while shared_preload_libraries is being processed.
pub fn init() {
    pgrx::pg_shmem_init!(TABLE);
    ATTACHED.store(true, Ordering::Relaxed);
}

fn current_database() -> u32 {
    // SAFETY: set once the backend has connected to a database.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// Updates this database's slot, claiming a free one on first use.
fn update(f: impl FnOnce(&mut Slot)) {
    if !ATTACHED.load(Ordering::Relaxed) {
        return;
    }
    let database = current_database();
    let mut table = TABLE.exclusive();
    let index = table
        .slots
        .iter()
        .position(|s| s.database == database)
        .or_else(|| {
            let free = table.slots.iter().position(|s| s.database == 0)?;
            table.slots[free].database = database;
            Some(free)
        });
    if let Some(index) = index {
        f(&mut table.slots[index]);
    }
}

/// A finished sweep of this database (by the worker, pg_cron or a manual idem_sweep()).
pub fn record_sweep(removed: i64, longest_batch_micros: i64) {
    let now = crate::store::clock_now();
    update(|slot| {
        slot.last_sweep_at = now;
        slot.last_removed = removed;
        slot.total_removed += removed;
        slot.sweeps += 1;
        slot.longest_batch_micros = slot.longest_batch_micros.max(longest_batch_micros);
    });
}

/// A sweep of this database that failed (logged by the worker, retried at the next interval).
pub fn record_error() {
    let now = crate::store::clock_now();
    update(|slot| {
        slot.errors += 1;
        slot.last_error_at = now;
    });
}

fn timestamp(micros: i64) -> Option<TimestampWithTimeZone> {
    // SAFETY: microseconds since 2000-01-01, which is what a timestamptz datum is.
    (micros != 0)
        .then(|| unsafe { TimestampWithTimeZone::from_datum(pg_sys::Datum::from(micros), false) })
        .flatten()
}

/// This database's sweep record since the server started; one row of NULLs without preload or before the
/// first sweep.
#[pg_extern(stable, parallel_safe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
#[allow(clippy::type_complexity)]
fn idem_sweep_status() -> TableIterator<
    'static,
    (
        name!(last_sweep_at, Option<TimestampWithTimeZone>),
        name!(last_sweep_removed, Option<i64>),
        name!(removed_since_start, Option<i64>),
        name!(sweeps_since_start, Option<i64>),
        name!(longest_batch, Option<pgrx::datum::Interval>),
        name!(sweep_errors, Option<i64>),
        name!(last_error_at, Option<TimestampWithTimeZone>),
    ),
> {
    let slot = ATTACHED
        .load(Ordering::Relaxed)
        .then(|| {
            TABLE
                .share()
                .slots
                .iter()
                .find(|s| s.database == current_database())
                .copied()
        })
        .flatten();
    let row = match slot {
        None => (None, None, None, None, None, None, None),
        Some(s) => (
            timestamp(s.last_sweep_at),
            Some(s.last_removed),
            Some(s.total_removed),
            Some(s.sweeps),
            Some(pgrx::datum::Interval::from_micros(s.longest_batch_micros)),
            Some(s.errors),
            timestamp(s.last_error_at),
        ),
    };
    TableIterator::once(row)
}
