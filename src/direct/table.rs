//! Opening `idem_keys` for a write on the direct path, and the four table operations it needs: a
//! speculative insert, an update that waits for a concurrent writer, and a fetch by key. `open` first checks
//! that the table is still exactly what sql/bootstrap.sql creates (shape.rs); for anything else it
//! declines and the caller runs the SPI statement, which honours whatever a DBA changed.

use super::by_key::{fetch_by_key, hash_value, text_bytes, Fetched, KeyIndex, ReadIndex};
use super::row::col;
use super::shape::{check_table, key_indexes, open_relation, remember, Decline};
use crate::catalog;
use crate::compat::{self, IndexUpdate};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ptr;

/// The table, its indexes and a minimal executor state, as a ModifyTable node would hold them. While it is
/// open the executor state's memory context is current (scratch allocations die with it); `caller` is the
/// context results go to.
pub struct Table {
    pub rel: pg_sys::Relation,
    caller: pg_sys::MemoryContext,
    pub sequence: pg_sys::Oid,
    read_by: KeyIndex,
    /// The primary key, for the reads the hash index leaves to it (`by_key::Fetched::Crowded`).
    pkey: pg_sys::Relation,
    /// Every unique index on exactly (scope, key), the primary key first: what `INSERT … ON CONFLICT
    /// (scope, key)` infers as its arbiters. A second one is what a DBA builds to replace a bloated primary
    /// key concurrently; a racing first claim must not raise 23505 from it.
    arbiters: *mut pg_sys::List,
    estate: *mut pg_sys::EState,
    rri: *mut pg_sys::ResultRelInfo,
    /// The hash index's IndexInfo once the index (`read_by`) is moved past the end of the result relation's
    /// index arrays (`set_aside_hash`): this file inserts its entries itself.
    hash_info: Option<*mut pg_sys::IndexInfo>,
}

pub enum Updated {
    Done,
    Concurrently,
    Declined,
}

impl Table {
    /// Opens `idem_keys` (the extension's own, found by OID: catalog.rs) for writing, with its indexes, or says
    /// why the direct path must not write it.
    ///
    /// # Safety
    /// Inside a transaction, in a function call; the result must be closed (or the transaction aborted).
    pub unsafe fn open(
        scope: &str,
        speculative: bool,
        updated_columns: &[usize],
    ) -> Result<Table, Decline> {
        unsafe {
            let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
            let (rel, found, generation) = open_relation(scope, lock)?;
            let relid = (*rel).rd_id;
            if let Err(why) = check_table(rel) {
                pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                return Err(why);
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
            compat::init_range_table(estate, relid, lock, updated_columns);
            let rri = PgBox::<pg_sys::ResultRelInfo>::alloc_node(pg_sys::NodeTag::T_ResultRelInfo)
                .into_pg();
            pg_sys::InitResultRelInfo(rri, rel, 1, ptr::null_mut(), 0);
            (*estate).es_output_cid = pg_sys::GetCurrentCommandId(true);
            pg_sys::ExecOpenIndices(rri, speculative);
            let mut table = Table {
                rel,
                caller,
                sequence: found.sequence,
                read_by: KeyIndex::primary(ptr::null_mut()),
                pkey: ptr::null_mut(),
                arbiters: ptr::null_mut(),
                estate,
                rri,
                hash_info: None,
            };
            let indexes = match (*rri).ri_NumIndices as usize {
                0 => &[][..],
                n => std::slice::from_raw_parts((*rri).ri_IndexRelationDescs, n),
            };
            match key_indexes(indexes) {
                Ok((pkey, read_by, arbiters)) => {
                    table.pkey = pkey;
                    table.read_by = read_by;
                    table.arbiters = arbiters;
                    if read_by.kind == ReadIndex::Hash {
                        table.set_aside_hash(read_by.index);
                    }
                    // Only if no invalidation arrived while the indexes were locked: the checks above may
                    // have read the table's state from before it.
                    if catalog::generation() == generation {
                        remember(generation, read_by);
                    }
                    Ok(table)
                }
                Err(why) => {
                    table.close();
                    Err(why)
                }
            }
        }
    }

    /// Releases the executor state and the indexes; the table lock is kept until the transaction ends.
    ///
    /// # Safety
    /// Called once, with the table open.
    pub unsafe fn close(self) {
        unsafe {
            pg_sys::CurrentMemoryContext = self.caller;
            if self.hash_info.is_some() {
                (*self.rri).ri_NumIndices += 1;
            }
            pg_sys::ExecCloseIndices(self.rri);
            pg_sys::FreeExecutorState(self.estate);
            pg_sys::table_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }

    /// ExecInsert's speculative insertion. False when a concurrent insert took the key after the check, or when
    /// `keep`, asked once the tuple and its index entries are in and no conflict was found, says no; the
    /// tuple is then dead and nobody ever waited on it as a committed row.
    ///
    /// # Safety
    /// Opened with `speculative`; `slot` holds a complete new row.
    pub unsafe fn insert_speculatively(
        &self,
        slot: *mut pg_sys::TupleTableSlot,
        keep: impl FnOnce() -> bool,
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
            compat::insert_index_tuples(
                self.rri,
                slot,
                self.estate,
                false,
                &mut conflict,
                self.arbiters,
                IndexUpdate::All,
            );
            if !conflict && !keep() {
                conflict = true;
            }
            if !conflict {
                self.insert_hash_entry(slot);
            }
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
    ///
    /// # Safety
    /// `old` holds a version `snapshot` saw, fetched from this table; `new` holds the complete new row.
    pub unsafe fn update(
        &self,
        old: *mut pg_sys::TupleTableSlot,
        new: *mut pg_sys::TupleTableSlot,
        snapshot: pg_sys::Snapshot,
    ) -> Updated {
        unsafe {
            let cid = (*self.estate).es_output_cid;
            match compat::tuple_update(self.rel, &mut (*old).tts_tid, new, cid, snapshot) {
                (pg_sys::TM_Result::TM_Ok, which) => {
                    // As ExecUpdateEpilogue: a HOT update adds entries only to summarizing indexes.
                    if which != IndexUpdate::None {
                        compat::insert_index_tuples(
                            self.rri,
                            new,
                            self.estate,
                            true,
                            ptr::null_mut(),
                            ptr::null_mut(),
                            which,
                        );
                    }
                    // A hash index is not summarizing: it needs an entry exactly when every index does.
                    if which == IndexUpdate::All {
                        self.insert_hash_entry(new);
                    }
                    pg_sys::CommandCounterIncrement();
                    Updated::Done
                }
                (pg_sys::TM_Result::TM_Updated | pg_sys::TM_Result::TM_Deleted, _) => {
                    Updated::Concurrently
                }
                // Changed by this very command (a second finish in one statement): let SPI decide.
                _ => Updated::Declined,
            }
        }
    }

    /// Moves the hash index to the end of the result relation's index arrays and out of its count, so
    /// that ExecInsertIndexTuples skips it: evaluating its expression there means planning and compiling
    /// `scope || key` for every statement (a new executor state each time), some 6,000 instructions of a
    /// claim and as many of a finish, where `insert_hash_entry` concatenates two strings. `close` puts the
    /// count back, so ExecCloseIndices closes it with the others.
    ///
    /// # Safety
    /// Opened; `hash` is one of the result relation's open indexes.
    unsafe fn set_aside_hash(&mut self, hash: pg_sys::Relation) {
        unsafe {
            let rri = &mut *self.rri;
            let last = rri.ri_NumIndices as usize - 1;
            let descs = std::slice::from_raw_parts_mut(rri.ri_IndexRelationDescs, last + 1);
            let infos = std::slice::from_raw_parts_mut(rri.ri_IndexRelationInfo, last + 1);
            let at = descs
                .iter()
                .position(|&index| index == hash)
                .expect("an open index");
            descs.swap(at, last);
            infos.swap(at, last);
            rri.ri_NumIndices -= 1;
            self.hash_info = Some(infos[last]);
        }
    }

    /// The hash index's entry for the tuple in `slot` (just inserted or updated, so its TID is set): the
    /// hash of scope || key, as the index's expression would compute it.
    ///
    /// # Safety
    /// Opened; `slot` holds a row of this table that was just written.
    unsafe fn insert_hash_entry(&self, slot: *mut pg_sys::TupleTableSlot) {
        let Some(info) = self.hash_info else {
            return;
        };
        unsafe {
            pg_sys::slot_getallattrs(slot);
            let values = std::slice::from_raw_parts((*slot).tts_values, 2);
            let mut datum = [hash_value(
                text_bytes(values[col::SCOPE - 1]),
                text_bytes(values[col::KEY - 1]),
            )];
            let mut isnull = [false];
            pg_sys::index_insert(
                self.read_by.index,
                datum.as_mut_ptr(),
                isnull.as_mut_ptr(),
                &mut (*slot).tts_tid,
                self.rel,
                pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO,
                false,
                info,
            );
        }
    }

    /// The version of the key's row `snapshot` sees, into `slot`: through the hash index, or the primary
    /// key when too many other rows share the key's hash.
    ///
    /// # Safety
    /// The table is open; `slot` is a slot of this table.
    pub unsafe fn fetch(
        &self,
        scope: &str,
        key: &str,
        snapshot: pg_sys::Snapshot,
        slot: *mut pg_sys::TupleTableSlot,
    ) -> bool {
        unsafe {
            let fetched = match fetch_by_key(self.rel, self.read_by, scope, key, snapshot, slot) {
                Fetched::Crowded => fetch_by_key(
                    self.rel,
                    KeyIndex::primary(self.pkey),
                    scope,
                    key,
                    snapshot,
                    slot,
                ),
                fetched => fetched,
            };
            fetched == Fetched::Found
        }
    }
}

/// Whether the direct path would write the table as it stands now, and with how many arbiter indexes; or
/// why not. For the tests.
#[cfg(any(test, feature = "pg_test"))]
pub fn check() -> Result<usize, Decline> {
    // SAFETY: opened and closed inside the calling transaction.
    unsafe {
        Table::open("", true, &[]).map(|table| {
            let arbiters = if table.arbiters.is_null() {
                0
            } else {
                (*table.arbiters).length as usize
            };
            table.close();
            arbiters
        })
    }
}
