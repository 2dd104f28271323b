//! The hot path without SPI: under READ COMMITTED, `idem_claim` and `idem_finish` touch the table through
//! the executor's own primitives instead of planning and starting an executor for a statement per call.
//!
//! * A claim is the speculative insertion `INSERT … ON CONFLICT DO NOTHING` performs (nodeModifyTable.c):
//!   check the primary key for a conflict (waiting for an in-progress inserter or updater), insert the
//!   tuple with a speculative token, insert its index entries, and kill the tuple and start over if a
//!   concurrent insert won the key in between. On a conflict it reads the winning row with a fresh
//!   snapshot, which is what the SPI path's re-read does.
//! * A finish reads the row by key with a fresh snapshot, checks the token, and updates that version with
//!   `wait`: if a concurrent transaction changed the row first, it reads again and re-checks, as UPDATE's
//!   EvalPlanQual does.
//!
//! Everything else stays on SPI (store.rs): takeovers, error classification, every other verb, and the
//! isolation levels above READ COMMITTED, whose snapshot and serialization rules are the executor's to
//! apply. So does a table that is not the shape this file was written for (a trigger or CHECK constraint
//! added to it, say: `is_plain`): `open` then declines and the caller runs the statement instead.
//! `idem_keys.direct_path = off` forces SPI everywhere (`AB_B_OPTIONS="-c idem_keys.direct_path=off"
//! AB_B=idem bash bench/ab.sh` compares the two).
//!
//! Nothing here checks privileges: the callers are SECURITY DEFINER functions owned by the table's owner,
//! which is what the SPI statements would be checked against. Resources are released explicitly on the
//! way out; on an ERROR, transaction abort releases the relations, locks and buffer pins.

use crate::store::{Answer, Checkpoint, KeyRow};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ptr;

/// Column numbers (1-based, as in the catalog) of `idem_keys`; `open` checks the count.
mod col {
    pub const SCOPE: usize = 1;
    pub const KEY: usize = 2;
    pub const FINGERPRINT: usize = 3;
    pub const TOKEN: usize = 4;
    pub const ATTEMPT: usize = 5;
    pub const CREATED_AT: usize = 6;
    pub const CLAIMED_AT: usize = 7;
    pub const LEASE_ENDS_AT: usize = 8;
    pub const FINISHED_AT: usize = 9;
    pub const EXPIRES_AT: usize = 10;
    pub const STATUS_CODE: usize = 11;
    pub const RESPONSE: usize = 12;
    pub const RESPONSE_BYTES: usize = 13;
    pub const HEADERS: usize = 14;
    pub const CHECKPOINT: usize = 15;
    pub const CHECKPOINT_STATE: usize = 16;
    pub const COUNT: usize = 16;
}

/// The columns a finish writes: the range table says so, so that the primary key's new entry carries the
/// "unchanged" hint that lets btree clean up old versions bottom-up, and the other indexes' entries do not.
const FINISH_COLUMNS: [usize; 6] = [
    col::FINISHED_AT,
    col::EXPIRES_AT,
    col::STATUS_CODE,
    col::RESPONSE,
    col::RESPONSE_BYTES,
    col::HEADERS,
];

/// Rounds of "conflict, but the row changed before we could read it" before handing over to SPI. Each
/// round follows a concurrent commit on the same key, so more than two is already unusual.
const MAX_ROUNDS: usize = 8;

/// Whether the direct path may run: READ COMMITTED (each read may take a fresh snapshot; READ UNCOMMITTED is
/// the same level in PostgreSQL) and a read-write transaction (else the SPI statement raises the read-only
/// error the caller expects).
pub fn applies() -> bool {
    // SAFETY: plain reads of the backend's transaction state.
    crate::guc::direct_path()
        && unsafe {
            pg_sys::XactIsoLevel <= pg_sys::XACT_READ_COMMITTED as i32 && !pg_sys::XactReadOnly
        }
}

/// Claims the key, or reads the row that holds it. `None`: the direct path declined; run SPI instead.
/// The row of a fresh claim has `inserted` set; any other row is as a fresh snapshot sees it.
pub fn claim(
    scope: &str,
    key: &str,
    fingerprint: &[u8],
    now: i64,
    lease_ends_at: i64,
) -> Option<KeyRow> {
    // SAFETY: runs in a transaction, inside a function call; every pointer below comes from PostgreSQL and
    // lives until `close` (or transaction abort).
    unsafe {
        let table = Table::open(true, &[])?;
        let desc = (*table.rel).rd_att;
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsVirtual);
        let found = pg_sys::table_slot_create(table.rel, ptr::null_mut());
        let arbiter = pg_sys::lappend_oid(ptr::null_mut(), (*table.pkey).rd_id);
        let mut values = Row::nulls();
        values.set(col::SCOPE, text(scope));
        values.set(col::KEY, text(key));
        values.set(col::FINGERPRINT, fingerprint.into_datum().unwrap());
        values.set(col::TOKEN, 0i64.into()); // drawn only when we insert: a replay costs no token
        values.set(col::ATTEMPT, 1i32.into());
        values.set(col::CREATED_AT, now.into());
        values.set(col::CLAIMED_AT, now.into());
        values.set(col::LEASE_ENDS_AT, lease_ends_at.into());
        let mut row = None;
        for _ in 0..MAX_ROUNDS {
            pgrx::check_for_interrupts!();
            values.store(new);
            let mut conflict = pg_sys::ItemPointerData::default();
            if !pg_sys::ExecCheckIndexConstraints(
                table.rri,
                new,
                table.estate,
                &mut conflict,
                arbiter,
            ) {
                // A committed (or our own) row holds the key. If it changed since the check, check again.
                if pg_sys::table_tuple_fetch_row_version(
                    table.rel,
                    &mut conflict,
                    pg_sys::GetLatestSnapshot(),
                    found,
                ) {
                    row = Some(table.in_caller_context(|| key_row(found, fingerprint)));
                    break;
                }
                continue;
            }
            let token = next_token(table.sequence);
            values.set(col::TOKEN, token.into());
            values.store(new);
            if table.insert_speculatively(new, arbiter) {
                row = Some(claimed_row(token, now, lease_ends_at));
                break;
            }
        }
        pg_sys::ExecDropSingleTupleTableSlot(found);
        pg_sys::ExecDropSingleTupleTableSlot(new);
        table.close();
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
        let table = Table::open(false, &FINISH_COLUMNS)?;
        let desc = (*table.rel).rd_att;
        let old = pg_sys::table_slot_create(table.rel, ptr::null_mut());
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsVirtual);
        let mut keys = table.key_scan(scope, key);
        let mut stored = None;
        for _ in 0..MAX_ROUNDS {
            pgrx::check_for_interrupts!();
            let snapshot = pg_sys::GetLatestSnapshot();
            if !table.fetch_by_key(&mut keys, snapshot, old) {
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

/// The OIDs of the table and its token sequence, found by name on the pinned search_path (as the SPI
/// statements find them).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Names {
    table: pg_sys::Oid,
    sequence: pg_sys::Oid,
}

thread_local! {
    // Looked up once per backend instead of twice per claim (1.1 % of a new-key cycle's samples), and
    // forgotten whenever the relcache reports a change to either relation (DROP or ALTER EXTENSION, VACUUM's
    // statistics update) or resets itself.
    static NAMES: Cell<Option<Names>> = const { Cell::new(None) };
    static FORGETS_NAMES: Cell<bool> = const { Cell::new(false) };
}

/// None while the extension's table is not on the search path (SPI then raises the proper error).
fn names() -> Option<Names> {
    if let Some(names) = NAMES.get() {
        return Some(names);
    }
    // SAFETY: catalog lookups inside a transaction; the callback is registered once per backend.
    unsafe {
        if !FORGETS_NAMES.get() {
            pg_sys::CacheRegisterRelcacheCallback(Some(forget_names), pg_sys::Datum::from(0));
            FORGETS_NAMES.set(true);
        }
        let table = pg_sys::RelnameGetRelid(c"idem_keys".as_ptr());
        let sequence = pg_sys::RelnameGetRelid(c"idem_keys_token_seq".as_ptr());
        if table == pg_sys::InvalidOid || sequence == pg_sys::InvalidOid {
            return None;
        }
        NAMES.set(Some(Names { table, sequence }));
        Some(Names { table, sequence })
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_names(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if let Some(names) = NAMES.get() {
        if relid == pg_sys::InvalidOid || relid == names.table || relid == names.sequence {
            NAMES.set(None);
        }
    }
}

/// The column types of `idem_keys` in order, and which columns are NOT NULL.
const COLUMN_TYPES: [(pg_sys::Oid, bool); col::COUNT] = [
    (pg_sys::TEXTOID, true),
    (pg_sys::TEXTOID, true),
    (pg_sys::BYTEAOID, true),
    (pg_sys::INT8OID, true),
    (pg_sys::INT4OID, true),
    (pg_sys::TIMESTAMPTZOID, true),
    (pg_sys::TIMESTAMPTZOID, true),
    (pg_sys::TIMESTAMPTZOID, true),
    (pg_sys::TIMESTAMPTZOID, false),
    (pg_sys::TIMESTAMPTZOID, false),
    (pg_sys::INT4OID, false),
    (pg_sys::JSONBOID, false),
    (pg_sys::BYTEAOID, false),
    (pg_sys::JSONBOID, false),
    (pg_sys::TEXTOID, false),
    (pg_sys::JSONBOID, false),
];

/// Whether the table is still exactly what sql/ creates, so that writing its rows directly skips nothing
/// the executor would do: a plain heap table, not a partition, without triggers, rules, forced row-level
/// security or CHECK constraints, with these columns, types and NOT NULLs. A DBA who changes any of that
/// gets the SPI statements, which honour it.
unsafe fn is_plain(rel: pg_sys::Relation) -> bool {
    unsafe {
        let class = (*rel).rd_rel;
        let desc = (*rel).rd_att;
        if (*class).relkind as u8 != pg_sys::RELKIND_RELATION
            || (*class).relispartition
            || (*class).relforcerowsecurity
            || !(*rel).trigdesc.is_null()
            || !(*rel).rd_rules.is_null()
            || (*desc).natts as usize != col::COUNT
            || (!(*desc).constr.is_null() && (*(*desc).constr).num_check > 0)
        {
            return false;
        }
        let columns = (*desc).attrs.as_slice(col::COUNT);
        columns
            .iter()
            .zip(COLUMN_TYPES)
            .all(|(column, (type_oid, not_null))| {
                !column.attisdropped && column.atttypid == type_oid && column.attnotnull == not_null
            })
    }
}

/// The table, its indexes and a minimal executor state, as a ModifyTable node would hold them. While it is
/// open the executor state's memory context is current (scratch allocations die with it); `caller` is the
/// context results go to.
struct Table {
    rel: pg_sys::Relation,
    caller: pg_sys::MemoryContext,
    sequence: pg_sys::Oid,
    pkey: pg_sys::Relation,
    estate: *mut pg_sys::EState,
    rri: *mut pg_sys::ResultRelInfo,
}

enum Updated {
    Done,
    Concurrently,
    Declined,
}

impl Table {
    /// Opens `idem_keys` (found on the pinned search_path, like the SPI statements) for writing, with its
    /// indexes. `None` when it is not the plain table sql/bootstrap.sql creates.
    unsafe fn open(speculative: bool, updated_columns: &[usize]) -> Option<Table> {
        unsafe {
            let found = names()?;
            let relid = found.table;
            let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
            let rel = pg_sys::try_table_open(relid, lock);
            if rel.is_null() {
                // Dropped since we looked it up (DROP EXTENSION in a concurrent session): look again next
                // time; SPI raises the usual error now.
                NAMES.set(None);
                return None;
            }
            // Opening processed pending invalidations: if they were about our relations, look the names up
            // again, and leave this call to SPI if they changed (the sequence alone recreated, say).
            if names() != Some(found) || !is_plain(rel) {
                pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                return None;
            }
            if !updated_columns.is_empty() {
                // What UPDATE checks first: a publication that replicates updates needs a replica identity.
                pg_sys::CheckCmdReplicaIdentity(rel, pg_sys::CmdType::CMD_UPDATE);
            }
            // As SPI does before each statement: rows this command wrote so far become visible to our reads.
            pg_sys::CommandCounterIncrement();
            let estate = pg_sys::CreateExecutorState();
            let caller = pg_sys::CurrentMemoryContext;
            pg_sys::CurrentMemoryContext = (*estate).es_query_cxt;
            let rte =
                pgrx::PgBox::<pg_sys::RangeTblEntry>::alloc_node(pg_sys::NodeTag::T_RangeTblEntry)
                    .into_pg();
            (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
            (*rte).relid = relid;
            (*rte).relkind = pg_sys::RELKIND_RELATION as _;
            (*rte).rellockmode = lock;
            for &column in updated_columns {
                let member = column as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber;
                (*rte).updatedCols = pg_sys::bms_add_member((*rte).updatedCols, member);
            }
            pg_sys::ExecInitRangeTable(estate, pg_sys::lappend(ptr::null_mut(), rte.cast()));
            let rri =
                pgrx::PgBox::<pg_sys::ResultRelInfo>::alloc_node(pg_sys::NodeTag::T_ResultRelInfo)
                    .into_pg();
            pg_sys::InitResultRelInfo(rri, rel, 1, ptr::null_mut(), 0);
            (*estate).es_output_cid = pg_sys::GetCurrentCommandId(true);
            pg_sys::ExecOpenIndices(rri, speculative);
            let pkey = (0..(*rri).ri_NumIndices as usize)
                .map(|i| *(*rri).ri_IndexRelationDescs.add(i))
                .find(|&index| (*(*index).rd_index).indisprimary);
            let table = Table {
                rel,
                caller,
                sequence: found.sequence,
                pkey: pkey.unwrap_or(ptr::null_mut()),
                estate,
                rri,
            };
            if pkey.is_none() {
                table.close();
                return None;
            }
            Some(table)
        }
    }

    /// Runs `f` with the caller's context current, for values that must outlive `close`.
    unsafe fn in_caller_context<R>(&self, f: impl FnOnce() -> R) -> R {
        unsafe {
            pg_sys::CurrentMemoryContext = self.caller;
            let result = f();
            pg_sys::CurrentMemoryContext = (*self.estate).es_query_cxt;
            result
        }
    }

    unsafe fn close(self) {
        unsafe {
            pg_sys::CurrentMemoryContext = self.caller;
            pg_sys::ExecCloseIndices(self.rri);
            pg_sys::FreeExecutorState(self.estate);
            // Like the executor: the lock is kept until the transaction ends.
            pg_sys::table_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }

    /// ExecInsert's speculative insertion. False when a concurrent insert took the key after the check; the
    /// tuple is then dead and nobody ever waited on it as a committed row.
    unsafe fn insert_speculatively(
        &self,
        slot: *mut pg_sys::TupleTableSlot,
        arbiter: *mut pg_sys::List,
    ) -> bool {
        unsafe {
            let xid = pg_sys::GetCurrentTransactionId();
            let spec_token = pg_sys::SpeculativeInsertionLockAcquire(xid);
            let cid = (*self.estate).es_output_cid;
            pg_sys::table_tuple_insert_speculative(
                self.rel,
                slot,
                cid,
                0,
                ptr::null_mut(),
                spec_token,
            );
            let mut conflict = false;
            let recheck = pg_sys::ExecInsertIndexTuples(
                self.rri,
                slot,
                self.estate,
                false,
                true,
                &mut conflict,
                arbiter,
            );
            pg_sys::list_free(recheck);
            pg_sys::table_tuple_complete_speculative(self.rel, slot, spec_token, !conflict);
            // Wakes anyone who waited on the token: they now see a plain row, or none.
            pg_sys::SpeculativeInsertionLockRelease(xid);
            if !conflict {
                // Later commands of this transaction (or this statement) see the row, as after SPI.
                pg_sys::CommandCounterIncrement();
            }
            !conflict
        }
    }

    /// Replaces the version in `old` with `new`, waiting for a concurrent writer of it to end first.
    unsafe fn update(
        &self,
        old: *mut pg_sys::TupleTableSlot,
        new: *mut pg_sys::TupleTableSlot,
        snapshot: pg_sys::Snapshot,
    ) -> Updated {
        unsafe {
            let mut failure = pg_sys::TM_FailureData::default();
            let mut lock_mode: pg_sys::LockTupleMode::Type = 0;
            let mut update_indexes = false;
            let result = pg_sys::table_tuple_update(
                self.rel,
                &mut (*old).tts_tid,
                new,
                (*self.estate).es_output_cid,
                snapshot,
                ptr::null_mut(),
                true,
                &mut failure,
                &mut lock_mode,
                &mut update_indexes,
            );
            match result {
                pg_sys::TM_Result::TM_Ok => {
                    if update_indexes {
                        let recheck = pg_sys::ExecInsertIndexTuples(
                            self.rri,
                            new,
                            self.estate,
                            true,
                            false,
                            ptr::null_mut(),
                            ptr::null_mut(),
                        );
                        pg_sys::list_free(recheck);
                    }
                    pg_sys::CommandCounterIncrement();
                    Updated::Done
                }
                pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted => {
                    Updated::Concurrently
                }
                // Changed by this very command (a second finish in one statement): let SPI decide.
                _ => Updated::Declined,
            }
        }
    }

    /// Equality scan keys on the primary key (scope, key), with the index's collations.
    unsafe fn key_scan(&self, scope: &str, key: &str) -> [pg_sys::ScanKeyData; 2] {
        unsafe {
            let mut keys = [pg_sys::ScanKeyData::default(); 2];
            for (i, value) in [scope, key].into_iter().enumerate() {
                pg_sys::ScanKeyEntryInitialize(
                    &mut keys[i],
                    0,
                    (i + 1) as pg_sys::AttrNumber,
                    pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                    pg_sys::InvalidOid,
                    *(*self.pkey).rd_indcollation.add(i),
                    pg_sys::Oid::from(pg_sys::F_TEXTEQ),
                    text(value),
                );
            }
            keys
        }
    }

    /// The version of the key's row `snapshot` sees, into `slot`.
    unsafe fn fetch_by_key(
        &self,
        keys: &mut [pg_sys::ScanKeyData; 2],
        snapshot: pg_sys::Snapshot,
        slot: *mut pg_sys::TupleTableSlot,
    ) -> bool {
        unsafe {
            let scan = pg_sys::index_beginscan(self.rel, self.pkey, snapshot, 2, 0);
            pg_sys::index_rescan(scan, keys.as_mut_ptr(), 2, ptr::null_mut(), 0);
            let found =
                pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
            pg_sys::index_endscan(scan);
            found
        }
    }
}

/// A tuple's values under construction, indexed by 1-based column number.
struct Row {
    values: [pg_sys::Datum; col::COUNT],
    nulls: [bool; col::COUNT],
}

impl Row {
    fn nulls() -> Row {
        Row {
            values: [pg_sys::Datum::from(0); col::COUNT],
            nulls: [true; col::COUNT],
        }
    }

    /// The slot's values; by-reference ones still point into its buffer, so the slot must stay as it is.
    unsafe fn from_slot(slot: *mut pg_sys::TupleTableSlot) -> Row {
        unsafe {
            pg_sys::slot_getallattrs(slot);
            let mut row = Row::nulls();
            row.values
                .copy_from_slice(std::slice::from_raw_parts((*slot).tts_values, col::COUNT));
            row.nulls
                .copy_from_slice(std::slice::from_raw_parts((*slot).tts_isnull, col::COUNT));
            row
        }
    }

    fn set(&mut self, column: usize, value: pg_sys::Datum) {
        self.values[column - 1] = value;
        self.nulls[column - 1] = false;
    }

    fn set_opt(&mut self, column: usize, value: Option<pg_sys::Datum>) {
        match value {
            Some(value) => self.set(column, value),
            None => self.nulls[column - 1] = true,
        }
    }

    fn is_null(&self, column: usize) -> bool {
        self.nulls[column - 1]
    }

    /// A by-value column.
    fn get<T: FromDatum>(&self, column: usize) -> Option<T> {
        // SAFETY: the caller names the column's type; by-value types need no memory context.
        unsafe { T::from_datum(self.values[column - 1], self.nulls[column - 1]) }
    }

    /// A varlena column, detoasted into the current memory context.
    unsafe fn copied(&self, column: usize) -> Option<pg_sys::Datum> {
        if self.is_null(column) {
            return None;
        }
        // SAFETY: a non-null varlena of a tuple still held by its slot.
        unsafe {
            Some(pg_sys::Datum::from(pg_sys::pg_detoast_datum_copy(
                self.values[column - 1].cast_mut_ptr(),
            )))
        }
    }

    /// Puts the values into a virtual slot.
    unsafe fn store(&self, slot: *mut pg_sys::TupleTableSlot) {
        unsafe {
            pg_sys::ExecClearTuple(slot);
            std::slice::from_raw_parts_mut((*slot).tts_values, col::COUNT)
                .copy_from_slice(&self.values);
            std::slice::from_raw_parts_mut((*slot).tts_isnull, col::COUNT)
                .copy_from_slice(&self.nulls);
            pg_sys::ExecStoreVirtualTuple(slot);
        }
    }
}

/// The row as the claim that just inserted it knows it.
fn claimed_row(token: i64, now: i64, lease_ends_at: i64) -> KeyRow {
    KeyRow {
        inserted: true,
        token,
        attempt: 1,
        same_request: true,
        finished: false,
        lease_ends_at: Some(lease_ends_at),
        expires_at: None,
        answer: Answer::default(),
        created_at: now,
        checkpoint: Checkpoint::default(),
    }
}

/// A stored row, classified for `decide` like store::first_key_row does for the SPI path.
unsafe fn key_row(slot: *mut pg_sys::TupleTableSlot, fingerprint: &[u8]) -> KeyRow {
    unsafe {
        let row = Row::from_slot(slot);
        let finished = !row.is_null(col::FINISHED_AT);
        let stored_fingerprint = <&[u8]>::from_datum(
            row.values[col::FINGERPRINT - 1],
            row.is_null(col::FINGERPRINT),
        );
        KeyRow {
            inserted: false,
            token: row.get(col::TOKEN).unwrap_or_default(),
            attempt: row.get(col::ATTEMPT).unwrap_or_default(),
            same_request: stored_fingerprint == Some(fingerprint),
            finished,
            lease_ends_at: row.get(col::LEASE_ENDS_AT),
            expires_at: row.get(col::EXPIRES_AT),
            answer: Answer {
                status_code: row.get(col::STATUS_CODE),
                response: row.copied(col::RESPONSE),
                response_bytes: row.copied(col::RESPONSE_BYTES),
                headers: row.copied(col::HEADERS),
            },
            created_at: row.get(col::CREATED_AT).unwrap_or_default(),
            // A finished key's retained checkpoint is shown by no outcome (as in the SPI statements).
            checkpoint: if finished {
                Checkpoint::default()
            } else {
                Checkpoint {
                    point: row.copied(col::CHECKPOINT),
                    state: row.copied(col::CHECKPOINT_STATE),
                }
            },
        }
    }
}

unsafe extern "C-unwind" {
    /// The SQL function nextval(regclass)'s C entry point, called through fmgr (DirectFunctionCall1Coll is
    /// guarded, so an ERROR in it unwinds properly); pgrx only exposes a Rust wrapper of it.
    #[link_name = "nextval_oid"]
    fn nextval_fmgr(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// nextval('idem_keys_token_seq').
unsafe fn next_token(seq: pg_sys::Oid) -> i64 {
    unsafe {
        let value =
            pg_sys::DirectFunctionCall1Coll(Some(nextval_fmgr), pg_sys::InvalidOid, seq.into());
        value.value() as i64
    }
}

fn text(value: &str) -> pg_sys::Datum {
    value.into_datum().expect("text is never NULL")
}
