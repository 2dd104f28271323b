//! `idem_sweep`: delete expired answers and abandoned claims in bounded batches. The background worker and
//! pg_cron both call the same batch step.

use crate::store::{self, Stmt};
use pgrx::prelude::*;

/// Delete every finished key past its retention and every unfinished key whose lease ended more than
/// `idem_keys.abandon_after` ago, `batch_size` rows per statement. Rows locked by a live claim are skipped
/// (SKIP LOCKED), so a sweep never makes a claim wait and never removes a key a claim is taking over.
#[pg_extern(volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_sweep(batch_size: default!(Option<i32>, "NULL")) -> i64 {
    crate::args::writable("idem_sweep");
    refuse_on_a_citus_coordinator("idem_sweep");
    let batch_size = batch_size_or_default(batch_size);
    let mut sweep = Sweep::in_one_transaction();
    while sweep.batch(batch_size) {}
    sweep.record();
    sweep.removed
}

/// On a Citus coordinator the table is a shell: the rows are in the workers' shards, and a sweep here would
/// remove nothing and report 0, so a pg_cron job scheduled here would never sweep, silently. Say so, and
/// what to run instead. (The background worker, which sweeps every database it is told to, is not refused:
/// on the coordinator it finds no shard and does nothing, as docs/scale-out.md says.)
fn refuse_on_a_citus_coordinator(function: &str) {
    if crate::catalog::names().is_some_and(|names| names.distributed) && crate::citus::is_coordinator() {
        crate::error::sweep_on_coordinator(function)
    }
}

// Spelled out in the signature too: the SQL generator reads the macro there, not through an alias.
type Progress = pgrx::composite_type!('static, "idem_sweep_progress");

/// One batch of `CALL idem_sweep_paced()`, which commits after each: deletes from where `progress` says
/// (NULL: a new sweep) and returns where the next batch starts. The batch that comes back short ends the
/// sweep (`done`) and records it in `idem_sweep_status()`. `done` in the argument is not read.
#[pg_extern(volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_sweep_step(
    progress: Option<pgrx::composite_type!("idem_sweep_progress")>,
    batch_size: default!(Option<i32>, "NULL"),
) -> pgrx::composite_type!('static, "idem_sweep_progress") {
    crate::args::writable("idem_sweep_step");
    refuse_on_a_citus_coordinator("idem_sweep_step");
    let batch_size = batch_size_or_default(batch_size);
    let tuple = progress.as_ref();
    let timestamp = |name| -> Option<i64> {
        let value = tuple?.get_by_name::<TimestampWithTimeZone>(name).ok()??;
        Some(value.into())
    };
    let count = |name| tuple?.get_by_name::<i64>(name).ok()?;
    let mut sweep = Sweep {
        cursor: SweepCursor {
            finished_from: timestamp("finished_from").unwrap_or(i64::MIN),
            abandoned_from: timestamp("abandoned_from").unwrap_or(i64::MIN),
        },
        removed: count("removed").unwrap_or(0),
        longest_batch_micros: count("longest_batch_micros").unwrap_or(0),
        // idem_sweep_paced commits after every step.
        one_transaction: false,
    };
    let done = !sweep.batch(batch_size);
    if done {
        sweep.record();
    }
    progress_tuple(&sweep, done).unwrap_or_else(|e| panic!("building idem_sweep_progress: {e}"))
}

fn progress_tuple(sweep: &Sweep, done: bool) -> Result<Progress, Box<dyn std::error::Error>> {
    let mut tuple = PgHeapTuple::new_composite_type("idem_sweep_progress")?;
    let finished_from = TimestampWithTimeZone::try_from(sweep.cursor.finished_from)?;
    let abandoned_from = TimestampWithTimeZone::try_from(sweep.cursor.abandoned_from)?;
    tuple.set_by_name("finished_from", finished_from)?;
    tuple.set_by_name("abandoned_from", abandoned_from)?;
    tuple.set_by_name("removed", sweep.removed)?;
    tuple.set_by_name("longest_batch_micros", sweep.longest_batch_micros)?;
    tuple.set_by_name("done", done)?;
    Ok(tuple)
}

fn batch_size_or_default(batch_size: Option<i32>) -> i32 {
    match batch_size {
        Some(size) if size <= 0 => crate::error::not_positive_count("batch_size", size),
        Some(size) => size,
        None => crate::guc::sweep_batch_size(),
    }
}

/// A sweep in progress: where its next batch starts and what it removed so far. `idem_sweep` keeps one for
/// its call, the background worker for its pass, and `idem_sweep_step` carries one across the transactions
/// of `idem_sweep_paced` (as `idem_sweep_progress`).
#[derive(Clone, Copy, Default)]
pub struct Sweep {
    cursor: SweepCursor,
    pub removed: i64,
    /// The longest batch so far (the sweep record's longest batch).
    longest_batch_micros: i64,
    /// All batches run in one transaction (`idem_sweep`), where the index entries of rows this sweep deleted
    /// cannot be marked dead: a full batch then also takes the rest of the expiry (or lease end) it ended
    /// on, and the next batch starts just after it. Otherwise every batch inside a large group of keys
    /// sharing one expiry would step over all the group's rows deleted so far (quadratic). A sweep that
    /// commits each batch keeps batches bounded instead: its dead entries are marked once it commits.
    one_transaction: bool,
}

impl Sweep {
    pub fn in_one_transaction() -> Self {
        Sweep {
            one_transaction: true,
            ..Sweep::default()
        }
    }

    /// Deletes the next batch. True when it came back full, so more may be waiting.
    pub fn batch(&mut self, batch_size: i32) -> bool {
        let batch = sweep_batch(batch_size, self.cursor, self.one_transaction);
        self.cursor = batch.next;
        self.removed += batch.finished + batch.abandoned;
        self.longest_batch_micros = self.longest_batch_micros.max(batch.micros);
        batch.full
    }

    /// The sweep is over: record it in `idem_sweep_status()`.
    pub fn record(&self) {
        crate::sweep_stats::record_sweep(self.removed, self.longest_batch_micros);
    }
}

/// On a node of a Citus cluster: a batch over each shard of the table this node holds (citus.rs), so that
/// every worker's sweep (its background worker, or pg_cron there) removes the expired rows it stores, and a
/// node holding no shard (the coordinator) removes nothing. Each batch starts at the oldest row: the cursor
/// names a place in one table, and the shards are many. In one transaction (`idem_sweep`) each shard's rows
/// go in one statement per kind, so a sweep never steps over its own deleted rows batch after batch; a
/// sweep that commits each batch (`idem_sweep_paced`) deletes at most `batch_size` rows per shard and kind.
fn shards_batch(
    client: &pgrx::spi::SpiClient<'_>,
    shards: &[String],
    (now, abandoned_before): (i64, i64),
    batch_size: i32,
    one_transaction: bool,
) -> Batch {
    let max_rows = (!one_transaction).then_some(batch_size);
    let delete = |shard: &str, stmt, before| {
        let args = [
            store::timestamptz(before),
            store::raw(max_rows.map(pg_sys::Datum::from), pg_sys::INT4OID),
            store::timestamptz(i64::MIN), // -infinity
        ];
        let gone = store::run_on_shard(client, stmt, shard, &args);
        store::value::<i64>(&gone, 1).unwrap_or_default()
    };
    let (mut finished, mut abandoned, mut full) = (0, 0, false);
    for shard in shards {
        let shard_finished = delete(shard, Stmt::SweepFinished, now);
        let shard_abandoned = delete(shard, Stmt::SweepAbandoned, abandoned_before);
        full |= max_rows.is_some_and(|limit| shard_finished.max(shard_abandoned) >= limit as i64);
        finished += shard_finished;
        abandoned += shard_abandoned;
    }
    Batch {
        finished,
        abandoned,
        full,
        micros: store::clock_now() - now,
        next: SweepCursor::default(),
    }
}

struct Batch {
    finished: i64,
    abandoned: i64,
    /// Either kind filled its batch, so more may be waiting.
    full: bool,
    /// How long the two statements took.
    micros: i64,
    /// Where the next batch of the same sweep starts.
    next: SweepCursor,
}

/// Where one sweep got to: the latest expiry and lease end its batches deleted. The next batch starts
/// there instead of at the oldest index entry. A row left behind (locked by a claim taking it over when
/// its batch ran) is still expired at the next sweep, which starts from the beginning.
#[derive(Clone, Copy)]
struct SweepCursor {
    finished_from: i64,
    abandoned_from: i64,
}

impl Default for SweepCursor {
    fn default() -> Self {
        // timestamptz '-infinity'
        SweepCursor {
            finished_from: i64::MIN,
            abandoned_from: i64::MIN,
        }
    }
}

/// One batch from `from`: at most `batch_size` expired answers and at most `batch_size` abandoned claims,
/// plus, with `take_ties`, the rest of the timestamp a full batch ended on (see `Sweep::one_transaction`).
fn sweep_batch(batch_size: i32, from: SweepCursor, take_ties: bool) -> Batch {
    let now = store::clock_now();
    let abandoned_before = now.saturating_sub(crate::guc::abandon_after_micros());
    let limit = batch_size as i64;
    let citus_shards = crate::catalog::names()
        .filter(|names| names.distributed)
        .map(|names| crate::citus::local_shards(&names));
    store::with_spi(|client| {
        if let Some(shards) = &citus_shards {
            let befores = (now, abandoned_before);
            return shards_batch(client, shards, befores, batch_size, take_ties);
        }
        // (rows deleted, the latest timestamp among them or `from` when none); `max_rows` None: every row
        let delete = |stmt, before, from: i64, max_rows: Option<i32>| {
            let gone = store::run(
                client,
                stmt,
                &[
                    store::timestamptz(before),
                    store::raw(max_rows.map(pg_sys::Datum::from), pg_sys::INT4OID),
                    store::timestamptz(from),
                ],
            );
            let count = store::value::<i64>(&gone, 1).unwrap_or_default();
            (count, store::timestamp(&gone, 2).unwrap_or(from))
        };
        // (rows deleted, where the next batch starts)
        let kind = |stmt, before, from| {
            let (count, last) = delete(stmt, before, from, Some(batch_size));
            if !take_ties || count < limit {
                return (count, last);
            }
            let (rest, _) = delete(stmt, last, last, None);
            (count + rest, last.saturating_add(1))
        };
        let (finished, finished_from) = kind(Stmt::SweepFinished, now, from.finished_from);
        let (abandoned, abandoned_from) =
            kind(Stmt::SweepAbandoned, abandoned_before, from.abandoned_from);
        Batch {
            finished,
            abandoned,
            full: finished >= limit || abandoned >= limit,
            micros: store::clock_now() - now,
            next: SweepCursor {
                finished_from,
                abandoned_from,
            },
        }
    })
}
