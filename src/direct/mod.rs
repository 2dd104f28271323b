//! The hot path without SPI: under READ COMMITTED, `idem_claim` and `idem_finish` touch the table through
//! the executor's own primitives instead of planning and starting an executor for a statement per call.
//!
//! * A claim first reads the key with a dirty snapshot (`dirty.rs`): the committed row, and whether another
//!   open transaction is writing it, without waiting for it. A key nobody holds is inserted as
//!   `INSERT … ON CONFLICT DO NOTHING`'s speculative insertion does (nodeModifyTable.c): the tuple with a
//!   speculative token, its index entries, and the tuple killed if a concurrent insert won the key in
//!   between, after which the claim reads again.
//! * A finish reads the row by key with a fresh snapshot, checks the token, and updates that version with
//!   `wait`: if a concurrent transaction changed the row first, it reads again and re-checks, as UPDATE's
//!   EvalPlanQual does.
//!
//! Everything else stays on SPI (store.rs): takeovers, error classification, every other verb, and the
//! isolation levels above READ COMMITTED, whose snapshot and serialization rules are the executor's to
//! apply. So does a table that is not the shape this module was written for (a trigger, a CHECK constraint,
//! a redefined primary key: `shape::Decline` lists them): `Table::open` then declines, with a DEBUG1
//! message saying why, and the caller runs the statement instead.
//!
//! Files: `table.rs` opens the table for a write and does its operations, `reader.rs` opens it for a read
//! by key, `shape.rs` decides whether the table is still the shape this module was written for,
//! `by_key.rs` reads a row by key through one index, `row.rs` is the row layout. The code that differs
//! between PostgreSQL majors is `crate::compat`.
//!
//! `idem_keys.direct_path = off` forces SPI everywhere (`AB_B_OPTIONS="-c idem_keys.direct_path=off"
//! AB_B=idem bash bench/ab.sh` compares the two).
//!
//! A replay needs none of a write's set-up: `probe` reads the key through one index alone, with a
//! `reader::Reader` that opens only the table and that index (the hash of `scope || key`; the primary key
//! if a DBA dropped it), and `idem_claim` answers from it when the row
//! is a finished answer (or a mismatch); `lookup` is the same read for `idem_lookup`.
//!
//! Nothing here checks privileges: the callers are SECURITY DEFINER functions, the table is found by OID in
//! the extension's schema (catalog.rs; never through the caller's search_path), and `Table::open` declines
//! unless the functions' owner owns the table (and no row security can apply), so the SPI statements'
//! checks would pass. Resources are released explicitly on the way out; on an ERROR, transaction abort releases the
//! relations, locks and buffer pins.

pub mod by_key;
pub mod dirty;
pub mod reader;
pub mod row;
pub mod shape;
pub mod table;

use crate::key_row::KeyRow;
use by_key::Fetched;
pub use dirty::{Seen, Writer};
use pgrx::pg_sys;
use pgrx::prelude::*;
use reader::Reader;
use row::{col, Row, FINISH_COLUMNS};
use shape::Decline;
use std::ptr;
use table::{Table, Updated};

/// Rounds of "conflict, but the row changed before we could read it" before handing over to SPI. Each
/// round follows a concurrent commit on the same key, so more than two is already unusual.
const MAX_ROUNDS: usize = 8;

/// Whether the direct path may write: `applies_to_reads`, in a read-write transaction (else the SPI
/// statement raises the read-only error the caller expects).
pub fn applies() -> bool {
    // SAFETY: a plain read of the backend's transaction state.
    applies_to_reads() && unsafe { !pg_sys::XactReadOnly }
}

/// Whether the direct path may read: switched on, and READ COMMITTED (each read may take a fresh snapshot;
/// READ UNCOMMITTED is the same level in PostgreSQL). On a table Citus distributes, whether the scope's shard
/// is here is for `shape::open_relation` to say, per call.
pub fn applies_to_reads() -> bool {
    // SAFETY: a plain read of the backend's transaction state.
    crate::guc::direct_path()
        && unsafe { pg_sys::XactIsoLevel <= pg_sys::XACT_READ_COMMITTED as i32 }
}

/// Opens the table, or says at DEBUG1 why the call goes to SPI (`SET client_min_messages = debug1` shows it).
///
/// # Safety
/// As for `Table::open`: inside a transaction, and the table is closed before the call returns.
unsafe fn open(scope: &str, speculative: bool, updated_columns: &[usize]) -> Option<Table> {
    or_declined(unsafe { Table::open(scope, speculative, updated_columns) })
}

/// The opened table (or reader), or None after the DEBUG1 line that says why the call goes to SPI.
fn or_declined<T>(opened: Result<T, Decline>) -> Option<T> {
    opened
        .map_err(|why| {
            debug1!("idem_keys: direct path declined ({why:?}); running the SQL statement instead")
        })
        .ok()
}

/// What a direct claim's insert did.
pub enum Inserted {
    /// The key is ours: the row as the claim that inserted it knows it.
    Claimed(KeyRow),
    /// Another transaction's row took the key first (committed, or still being written): read it again.
    Conflict,
    /// `keep` said no: another open transaction holds the key's lock (a claim it has not written yet).
    Refused,
}

/// Inserts the key's row, as `INSERT … ON CONFLICT DO NOTHING`'s speculative insertion does, for a key that
/// a dirty read (`probe`) just found free. It never waits for another transaction: a row committed or being
/// inserted since the probe makes the insertion report a conflict, and the caller probes again, which says
/// whether the other writer is still open. `keep` is asked once the row and its index entries are in:
/// false kills the row (`Refused`). `None`: the direct path declined; run SPI instead.
pub fn claim(
    scope: &str,
    key: &str,
    fingerprint: &[u8],
    now: i64,
    lease_ends_at: i64,
    keep: impl FnOnce() -> bool,
) -> Option<Inserted> {
    // SAFETY: runs in a transaction, inside a function call; every pointer below comes from PostgreSQL and
    // lives until `close` (or transaction abort).
    unsafe {
        let table = open(scope, true, &[])?;
        let desc = (*table.rel).rd_att;
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsVirtual);
        let mut values = Row::claim(scope, key, fingerprint, now, lease_ends_at);
        let token = next_token(table.sequence);
        values.set(col::TOKEN, token.into());
        values.store(new);
        let mut refused = false;
        let inserted = if table.insert_speculatively(new, || {
            refused = !keep();
            !refused
        }) {
            Inserted::Claimed(KeyRow::claimed(token, now, lease_ends_at))
        } else if refused {
            Inserted::Refused
        } else {
            Inserted::Conflict
        };
        pg_sys::ExecDropSingleTupleTableSlot(new);
        table.close();
        Some(inserted)
    }
}

/// A claim's first read: every version of the key a dirty snapshot sees, through one index alone (a
/// `reader::Reader`: the hash of scope || key, else the primary key), which is all a retry's replay needs
/// and all a new key's claim needs to know that nobody else is writing it (dirty.rs). `None`: the reader
/// declined (the caller falls back to SPI and the key lock, and says why at DEBUG1), or too many rows share
/// the key's hash.
pub fn probe(scope: &str, key: &str, fingerprint: &[u8]) -> Option<Seen> {
    // SAFETY: in a transaction, inside a function call; the reader is released before return.
    unsafe {
        let reader = or_declined(Reader::open(
            scope,
            pg_sys::RowExclusiveLock as pg_sys::LOCKMODE,
        ))?;
        // As SPI does before each statement: rows this command wrote so far become visible to our read.
        pg_sys::CommandCounterIncrement();
        let seen = dirty::read(&reader, scope, key, fingerprint);
        reader.close();
        seen
    }
}

/// A claim this transaction made without writing it (src/pending.rs), as its row will be written.
pub struct Claimed<'a> {
    pub scope: &'a str,
    pub key: &'a str,
    pub fingerprint: &'a [u8],
    pub token: i64,
    pub created_at: i64,
    pub lease_ends_at: i64,
}

/// Writes a claim this transaction has not written yet, finished with `answer` if given: one insert of the
/// row as it ends up. `Some(true)`: written. `Some(false)`: a conflicting row stayed in the way (a
/// transaction backing off from the key; the caller's SQL statement waits for it). `None`: declined.
pub fn insert_claimed(claimed: &Claimed, answer: Option<&Finish>) -> Option<bool> {
    // SAFETY: as in `claim`.
    unsafe {
        let table = open(claimed.scope, true, &[])?;
        let desc = (*table.rel).rd_att;
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsVirtual);
        let mut values = Row::claim(
            claimed.scope,
            claimed.key,
            claimed.fingerprint,
            claimed.created_at,
            claimed.lease_ends_at,
        );
        values.set(col::TOKEN, claimed.token.into());
        if let Some(answer) = answer {
            values.set(col::FINISHED_AT, answer.finished_at.into());
            values.set(col::EXPIRES_AT, answer.expires_at.into());
            values.set(col::STATUS_CODE, answer.status_code.into());
            values.set_opt(col::RESPONSE, answer.response);
            values.set_opt(col::RESPONSE_BYTES, answer.response_bytes);
            values.set_opt(col::HEADERS, answer.headers);
        }
        values.store(new);
        let mut written = false;
        for _ in 0..MAX_ROUNDS {
            pgrx::check_for_interrupts!();
            if table.insert_speculatively(new, || true) {
                written = true;
                break;
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(new);
        table.close();
        Some(written)
    }
}

/// A new fencing token: nextval('idem_keys_token_seq'), without SPI.
pub fn draw_token() -> i64 {
    let names = crate::catalog::names().expect("the extension's objects exist: a verb was called");
    // SAFETY: the extension's token sequence, in a transaction.
    unsafe { next_token(names.sequence) }
}

/// Waits for the open transaction `xid` to end (a finish, release or sweep of the key that is committing),
/// as an insert's unique check would, so that a read after it sees what it committed. Cancellable, and
/// `lock_timeout` and the deadlock detector apply.
pub fn wait_for(xid: pg_sys::TransactionId) {
    // SAFETY: waits on the transaction's lock, in a transaction.
    unsafe {
        pg_sys::XactLockTableWait(
            xid,
            ptr::null_mut(),
            ptr::null_mut(),
            pg_sys::XLTW_Oper::XLTW_None,
        )
    }
}

/// `idem_lookup`'s read: the key's row as its SPI statement would see it, taking only AccessShareLock, so
/// that it also runs on a hot standby. That is the calling query's snapshot while the transaction has
/// written nothing; once it has (an xid), pgrx runs the statement read-write, which first makes this
/// command's own writes visible and takes a fresh snapshot, and so does this. `None`: run the SQL statement
/// instead. The row's fingerprint is not compared (`same_request` means nothing).
///
/// Inside a parallel query (idem_lookup is PARALLEL RESTRICTED: it runs in the leader, which holds this
/// transaction's unwritten claims, src/pending.rs, but in parallel mode all the same) the query's snapshot is the one to read with, at
/// any isolation level: PostgreSQL forbids a new snapshot and a command counter step there (and so the SPI
/// statement after a write), and no command of a parallel query writes, so there is nothing newer of ours
/// to see. `parallel` is `IsInParallelMode()`, which the caller checked to come here at any level.
pub fn lookup(scope: &str, key: &str, parallel: bool) -> Option<Option<KeyRow>> {
    // SAFETY: as in `probe`; the active snapshot is the calling query's.
    unsafe {
        if !pg_sys::ActiveSnapshotSet() {
            return None;
        }
        let wrote = pg_sys::GetCurrentTransactionIdIfAny() != pg_sys::InvalidTransactionId;
        let reader = or_declined(Reader::open(
            scope,
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        ))?;
        let snapshot = if wrote && !parallel {
            pg_sys::CommandCounterIncrement();
            pg_sys::GetLatestSnapshot()
        } else {
            pg_sys::GetActiveSnapshot()
        };
        let row = read(&reader, scope, key, snapshot, &[]);
        reader.close();
        row
    }
}

/// The key's row as `snapshot` sees it, copied into the current memory context; `Some(None)`: no row.
/// `None`: too many rows of other keys share its hash (`by_key::MAX_OTHER_ROWS`), so the caller leaves the
/// read to the full path (a claim) or the SQL statement (a lookup), which go through the primary key.
///
/// # Safety
/// `reader` is open; `snapshot` stays valid during the call.
unsafe fn read(
    reader: &Reader,
    scope: &str,
    key: &str,
    snapshot: pg_sys::Snapshot,
    fingerprint: &[u8],
) -> Option<Option<KeyRow>> {
    unsafe {
        let slot = pg_sys::table_slot_create(reader.rel, ptr::null_mut());
        let row = match reader.fetch(scope, key, snapshot, slot) {
            Fetched::Found => Some(Some(Row::from_slot(slot).key_row(fingerprint))),
            Fetched::Absent => Some(None),
            Fetched::Crowded => None,
        };
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        row
    }
}

/// The stored answer of a finish, as datums owned by the caller.
pub struct Finish {
    pub token: i64,
    pub finished_at: i64,
    pub expires_at: i64,
    pub status_code: i32,
    pub response: Option<pg_sys::Datum>,
    pub response_bytes: Option<pg_sys::Datum>,
    pub headers: Option<pg_sys::Datum>,
}

/// Stores the answer if `token` owns the unfinished key: `Some(true)`. `Some(false)`: it does not (unknown
/// key, another owner, already finished); the caller works out which with SPI. `None`: run SPI instead.
pub fn finish(scope: &str, key: &str, answer: &Finish) -> Option<bool> {
    // SAFETY: as in `claim`.
    unsafe {
        let table = open(scope, false, &FINISH_COLUMNS)?;
        let desc = (*table.rel).rd_att;
        let old = pg_sys::table_slot_create(table.rel, ptr::null_mut());
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsVirtual);
        let mut stored = None;
        for _ in 0..MAX_ROUNDS {
            pgrx::check_for_interrupts!();
            let snapshot = pg_sys::GetLatestSnapshot();
            if !table.fetch(scope, key, snapshot, old) {
                stored = Some(false);
                break;
            }
            let mut values = Row::from_slot(old);
            if !values.is_null(col::FINISHED_AT)
                || values.get::<i64>(col::TOKEN) != Some(answer.token)
            {
                stored = Some(false);
                break;
            }
            values.set(col::FINISHED_AT, answer.finished_at.into());
            values.set(col::EXPIRES_AT, answer.expires_at.into());
            values.set(col::STATUS_CODE, answer.status_code.into());
            values.set_opt(col::RESPONSE, answer.response);
            values.set_opt(col::RESPONSE_BYTES, answer.response_bytes);
            values.set_opt(col::HEADERS, answer.headers);
            values.store(new);
            match table.update(old, new, snapshot) {
                Updated::Done => {
                    stored = Some(true);
                    break;
                }
                // Changed or deleted by a transaction that committed after our read: read it again.
                Updated::Concurrently => continue,
                Updated::Declined => break,
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(new);
        pg_sys::ExecDropSingleTupleTableSlot(old);
        table.close();
        stored
    }
}

unsafe extern "C-unwind" {
    /// The SQL function nextval(regclass)'s C entry point, called through fmgr (DirectFunctionCall1Coll is
    /// guarded, so an ERROR in it unwinds properly); pgrx only exposes a Rust wrapper of it.
    #[link_name = "nextval_oid"]
    fn nextval_fmgr(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// nextval('idem_keys_token_seq').
///
/// # Safety
/// `seq` is the token sequence, inside a transaction.
unsafe fn next_token(seq: pg_sys::Oid) -> i64 {
    unsafe {
        let value =
            pg_sys::DirectFunctionCall1Coll(Some(nextval_fmgr), pg_sys::InvalidOid, seq.into());
        value.value() as i64
    }
}
