//! Opening `idem_keys` for the direct path, and the four table operations it needs: a speculative insert,
//! an update that waits for a concurrent writer, and a fetch by key. `open` first checks that the table is
//! still exactly what sql/bootstrap.sql creates (`Table::check`); for anything else it declines and the
//! caller runs the SPI statement, which honours whatever a DBA changed.

pub use super::by_key::ReadIndex;
use super::by_key::{fetch_by_key, hash_value, is_key_hash_index, text_bytes, Fetched, KeyIndex};
use super::pg::{self, IndexUpdate};
use super::row::{col, COLUMNS};
use crate::home;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ptr;

/// Why the direct path left a call to SPI. Each is something the executor would honour and this file does
/// not; `idem_keys.direct_path = off` gives the same answers (tests/pg_regress/sql/direct_declines.sql).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Decline {
    /// The extension's table is not there (SPI raises the proper error), or was dropped or changed while
    /// it was being opened.
    NotFound,
    /// Not a plain heap table: a partition, a view, a table with inheritance children (relhassubclass,
    /// which PostgreSQL clears only at the next VACUUM or ANALYZE after the last child is dropped).
    NotPlainTable,
    /// Triggers, rules or CHECK constraints, which ExecInsert/ExecUpdate would run.
    Triggers,
    /// The columns, types or NOT NULLs differ from sql/bootstrap.sql, or a column has a default, is an
    /// identity or generated column.
    Columns,
    /// Row-level security could apply: forced on the table, or enabled while the caller is not its owner.
    RowSecurity,
    /// The functions' owner (the caller inside SECURITY DEFINER) does not own the table: SPI checks privileges.
    Owner,
    /// The primary key is not exactly `(scope, key)`: two text columns in that order, default btree
    /// operator family, the C collation, no INCLUDE column, no expression, no predicate, not deferrable.
    PrimaryKey,
    /// A unique index on scope or key other than the primary key and its exact copies: one being built
    /// concurrently, a deferrable one, or one of another shape. The statement decides what it means.
    UniqueIndex,
}

/// What a full open last found the table to be: the index a reader may use alone (`KeyIndex`), for the user
/// the checks ran as, in the relcache generation they ran in (`home::generation`). Every change `check_table`
/// or `key_indexes` looks at (a trigger, a column, an index, row security, the owner, inheritance) updates
/// the table's pg_class row or invalidates its relcache entry, and so bumps the generation.
#[derive(Clone, Copy)]
struct Verified {
    generation: u64,
    user: pg_sys::Oid,
    read_by: pg_sys::Oid,
    kind: ReadIndex,
}

thread_local! {
    static VERIFIED: Cell<Option<Verified>> = const { Cell::new(None) };
}

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
    /// Opens `idem_keys` (the extension's own, found by OID: home.rs) for writing, with its indexes, or says
    /// why the direct path must not write it.
    ///
    /// # Safety
    /// Inside a transaction, in a function call; the result must be closed (or the transaction aborted).
    pub unsafe fn open(speculative: bool, updated_columns: &[usize]) -> Result<Table, Decline> {
        unsafe {
            let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
            let (rel, found, generation) = open_relation(lock)?;
            let relid = found.table;
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
            pg::init_range_table(estate, relid, lock, updated_columns);
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
                    if home::generation() == generation {
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

    /// Whether the new row in `slot` is free to insert: false, with `conflict` set, when a committed (or our
    /// own) row holds its key in an arbiter, after waiting for an in-progress inserter of it.
    ///
    /// # Safety
    /// Opened with `speculative`; `slot` holds a complete new row.
    pub unsafe fn no_conflict(
        &self,
        slot: *mut pg_sys::TupleTableSlot,
        conflict: &mut pg_sys::ItemPointerData,
    ) -> bool {
        unsafe { pg::check_index_constraints(self.rri, slot, self.estate, conflict, self.arbiters) }
    }

    /// Runs `f` with the caller's context current, for values that must outlive `close`.
    ///
    /// # Safety
    /// The table is open.
    pub unsafe fn in_caller_context<R>(&self, f: impl FnOnce() -> R) -> R {
        unsafe {
            pg_sys::CurrentMemoryContext = self.caller;
            let result = f();
            pg_sys::CurrentMemoryContext = (*self.estate).es_query_cxt;
            result
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

    /// ExecInsert's speculative insertion. False when a concurrent insert took the key after the check; the
    /// tuple is then dead and nobody ever waited on it as a committed row.
    ///
    /// # Safety
    /// Opened with `speculative`; `slot` holds a complete new row.
    pub unsafe fn insert_speculatively(&self, slot: *mut pg_sys::TupleTableSlot) -> bool {
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
            pg::insert_index_tuples(
                self.rri,
                slot,
                self.estate,
                false,
                &mut conflict,
                self.arbiters,
                IndexUpdate::All,
            );
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
            match pg::tuple_update(self.rel, &mut (*old).tts_tid, new, cid, snapshot) {
                (pg_sys::TM_Result::TM_Ok, which) => {
                    // As ExecUpdateEpilogue: a HOT update adds entries only to summarizing indexes.
                    if which != IndexUpdate::None {
                        pg::insert_index_tuples(
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

/// The table and the one index a read by key goes through (`ReadIndex`), opened for one read: what a replay
/// and a lookup need, without the executor state and the other indexes a write opens. It opens only a
/// table whose shape a full `Table::open` verified since the relcache last reported a change to it;
/// otherwise it runs the same checks itself first, with its own lock mode (a lookup on a hot standby may
/// take no write lock).
pub struct Reader {
    pub rel: pg_sys::Relation,
    read_by: KeyIndex,
}

impl Reader {
    /// # Safety
    /// Inside a transaction, in a function call; the result must be closed (or the transaction aborted).
    pub unsafe fn open(lock: pg_sys::LOCKMODE) -> Result<Reader, Decline> {
        unsafe {
            let (rel, _, generation) = open_relation(lock)?;
            let verified = match VERIFIED.get() {
                Some(v) if v.generation == generation && v.user == pg_sys::GetUserId() => {
                    Ok((v.read_by, v.kind))
                }
                _ => check_table(rel).and_then(|()| verify_indexes(rel, lock)),
            };
            let read_by = match verified {
                Ok((oid, kind)) => KeyIndex {
                    index: pg_sys::index_open(oid, lock),
                    kind,
                },
                Err(why) => {
                    pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                    return Err(why);
                }
            };
            let reader = Reader { rel, read_by };
            // Locking the index may have processed more (a unique index being built concurrently): then
            // leave this call to the full path, which checks again.
            if home::generation() != generation {
                reader.close();
                return Err(Decline::NotFound);
            }
            remember(generation, read_by);
            Ok(reader)
        }
    }

    /// The version of the key's row `snapshot` sees, into `slot` (a slot of this table).
    ///
    /// # Safety
    /// The reader is open; `snapshot` is registered or active for the duration of the call.
    pub unsafe fn fetch(
        &self,
        scope: &str,
        key: &str,
        snapshot: pg_sys::Snapshot,
        slot: *mut pg_sys::TupleTableSlot,
    ) -> Fetched {
        unsafe { fetch_by_key(self.rel, self.read_by, scope, key, snapshot, slot) }
    }

    /// Which index the reader reads through. For the tests.
    #[cfg(any(test, feature = "pg_test"))]
    pub fn kind(&self) -> ReadIndex {
        self.read_by.kind
    }

    /// Closes the index and the table; their locks are kept until the transaction ends.
    ///
    /// # Safety
    /// Called once, with the reader open.
    pub unsafe fn close(self) {
        unsafe {
            pg_sys::index_close(self.read_by.index, pg_sys::NoLock as pg_sys::LOCKMODE);
            pg_sys::table_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }
}

/// Opens the extension's table with `lock`, with the names it was found by and the relcache generation
/// after the lock was taken.
///
/// # Safety
/// Inside a transaction; the relation must be closed (or the transaction aborted).
unsafe fn open_relation(
    lock: pg_sys::LOCKMODE,
) -> Result<(pg_sys::Relation, home::Names, u64), Decline> {
    unsafe {
        let found = home::names().ok_or(Decline::NotFound)?;
        let rel = pg_sys::try_table_open(found.table, lock);
        if rel.is_null() {
            // Dropped since we looked it up (DROP EXTENSION in a concurrent session): look again next
            // time; SPI raises the usual error now.
            home::forget();
            return Err(Decline::NotFound);
        }
        // Locking processed pending invalidations: if they were about our relations, look the names up
        // again, and leave this call to SPI if they changed (the sequence alone recreated, say). A change
        // to the table's shape has bumped the generation.
        let generation = home::generation();
        if home::names() != Some(found) {
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            return Err(Decline::NotFound);
        }
        Ok((rel, found, generation))
    }
}

/// Records that the table, as of `generation`, passed every check for the current user, with `read_by` as
/// the index its reads by key go through.
///
/// # Safety
/// `read_by` is open.
unsafe fn remember(generation: u64, read_by: KeyIndex) {
    unsafe {
        VERIFIED.set(Some(Verified {
            generation,
            user: pg_sys::GetUserId(),
            read_by: (*(*read_by.index).rd_index).indexrelid,
            kind: read_by.kind,
        }));
    }
}

/// `key_indexes` for a reader: opens every index of the table with `lock`, and returns the OID of the index
/// reads by key go through, if the direct path may use the table.
///
/// # Safety
/// `rel` is open with `lock`.
unsafe fn verify_indexes(
    rel: pg_sys::Relation,
    lock: pg_sys::LOCKMODE,
) -> Result<(pg_sys::Oid, ReadIndex), Decline> {
    unsafe {
        let oids = pg_sys::RelationGetIndexList(rel);
        let count = if oids.is_null() { 0 } else { (*oids).length };
        let indexes: Vec<pg_sys::Relation> = (0..count)
            .map(|i| pg_sys::index_open(pg_sys::list_nth_oid(oids, i), lock))
            .collect();
        let verdict = key_indexes(&indexes)
            .map(|(_, read_by, _)| ((*(*read_by.index).rd_index).indexrelid, read_by.kind));
        for index in indexes {
            pg_sys::index_close(index, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
        verdict
    }
}

/// Whether `index` is the hash index a full open found in this relcache generation: nothing the shape
/// check reads can have changed since, so it need not copy the index's expression again.
///
/// # Safety
/// `index` is an open index relation.
unsafe fn verified_hash(index: pg_sys::Relation) -> bool {
    unsafe {
        VERIFIED.get().is_some_and(|v| {
            v.kind == ReadIndex::Hash
                && v.read_by == (*(*index).rd_index).indexrelid
                && v.generation == home::generation()
        })
    }
}

/// Finds the primary key among the table's open indexes, checks its shape, picks the index reads by key go
/// through (the hash index if there is one of its shape, else the primary key), and lists the arbiters
/// (see `Table::arbiters`), in the executor's memory context.
///
/// # Safety
/// Every index is open.
unsafe fn key_indexes(
    indexes: &[pg_sys::Relation],
) -> Result<(pg_sys::Relation, KeyIndex, *mut pg_sys::List), Decline> {
    unsafe {
        let mut pkey = ptr::null_mut();
        let mut hash: pg_sys::Relation = ptr::null_mut();
        let mut arbiters = ptr::null_mut();
        for &index in indexes {
            if hash.is_null() && (verified_hash(index) || is_key_hash_index(index)) {
                hash = index;
                continue;
            }
            let form = &*(*index).rd_index;
            if form.indisprimary {
                if !is_scope_key_index(index) || !form.indimmediate {
                    return Err(Decline::PrimaryKey);
                }
                pkey = index;
                arbiters = pg_sys::lcons_oid(form.indexrelid, arbiters);
            } else if form.indisunique
                && is_scope_key_index(index)
                && form.indisvalid
                && form.indimmediate
            {
                arbiters = pg_sys::lappend_oid(arbiters, form.indexrelid);
            } else if form.indisunique && touches_scope_key(index) {
                // Not built yet (CREATE UNIQUE INDEX CONCURRENTLY under way), deferrable, or of another
                // shape (column order, collation, expression, predicate, more columns): what the
                // statement does with it (an error, a wait, 23505 in a race) is the answer to give.
                return Err(Decline::UniqueIndex);
            }
        }
        if pkey.is_null() {
            return Err(Decline::PrimaryKey);
        }
        let read_by = if hash.is_null() {
            KeyIndex::primary(pkey)
        } else {
            KeyIndex::hash(hash)
        };
        Ok((pkey, read_by, arbiters))
    }
}

/// Whether the table is still exactly what sql/ creates, so that writing its rows directly skips nothing
/// the executor would do. A DBA who changes any of it gets the SPI statements, which honour it.
///
/// # Safety
/// `rel` is an open relation.
unsafe fn check_table(rel: pg_sys::Relation) -> Result<(), Decline> {
    unsafe {
        let class = &*(*rel).rd_rel;
        let desc = (*rel).rd_att;
        // Inheritance children: an UPDATE of the parent reaches their rows too.
        if class.relkind as u8 != pg_sys::RELKIND_RELATION
            || class.relispartition
            || class.relhassubclass
        {
            return Err(Decline::NotPlainTable);
        }
        let constraints = (*desc).constr;
        if !(*rel).trigdesc.is_null()
            || !(*rel).rd_rules.is_null()
            || (!constraints.is_null() && (*constraints).num_check > 0)
        {
            return Err(Decline::Triggers);
        }
        let owned = class.relowner == pg_sys::GetUserId();
        if class.relforcerowsecurity || (class.relrowsecurity && !owned) {
            return Err(Decline::RowSecurity);
        }
        if !owned {
            return Err(Decline::Owner);
        }
        let defaults = !constraints.is_null()
            && ((*constraints).num_defval > 0 || (*constraints).has_generated_stored);
        if defaults || (*desc).natts as usize != col::COUNT {
            return Err(Decline::Columns);
        }
        let columns_match = COLUMNS
            .iter()
            .enumerate()
            .all(|(i, &(type_oid, not_null))| {
                let column = pg::attribute(desc, i);
                !column.attisdropped
                    && column.atttypid == type_oid
                    && column.attnotnull == not_null
                    && column.attidentity == 0
                    && column.attgenerated == 0
            });
        if !columns_match {
            return Err(Decline::Columns);
        }
        Ok(())
    }
}

/// Whether `index` is the primary key's shape: a btree on exactly (scope, key), in that order, with the
/// default text operator family, the C collation (sql/bootstrap.sql's columns), no INCLUDE column, no
/// expression, no predicate. A read by key through it (no hash index, or a crowded hash value) and a
/// conflict in such an index both mean the same (scope, key) that the SPI statements'
/// `WHERE scope = $1 AND key = $2` finds.
///
/// # Safety
/// `index` is an open index relation.
unsafe fn is_scope_key_index(index: pg_sys::Relation) -> bool {
    unsafe {
        let form = &*(*index).rd_index;
        // The cheap fields first: this runs for the primary key on every call.
        let shape = form.indnkeyatts == 2
            && form.indnatts == 2
            && (*(*index).rd_rel).relam == pg_sys::BTREE_AM_OID
            && form.indkey.values.as_slice(2) == [col::SCOPE as i16, col::KEY as i16]
            && (0..2).all(|i| {
                *(*index).rd_opfamily.add(i) == pg_sys::TEXT_BTREE_FAM_OID
                    && *(*index).rd_indcollation.add(i) == pg_sys::C_COLLATION_OID
            });
        let tuple = (*index).rd_indextuple;
        shape
            && pg_sys::heap_attisnull(
                tuple,
                pg_sys::Anum_pg_index_indexprs as i32,
                ptr::null_mut(),
            )
            && pg_sys::heap_attisnull(tuple, pg_sys::Anum_pg_index_indpred as i32, ptr::null_mut())
    }
}

/// Whether a unique index covers scope or key among its key columns: INSERT … ON CONFLICT (scope, key)
/// would infer it as an arbiter if its columns are exactly those two, in any order, with any collation.
///
/// # Safety
/// `index` is an open index relation.
unsafe fn touches_scope_key(index: pg_sys::Relation) -> bool {
    unsafe {
        let form = &*(*index).rd_index;
        let keys = form.indkey.values.as_slice(form.indnkeyatts as usize);
        keys.iter()
            .any(|&attnum| attnum == col::SCOPE as i16 || attnum == col::KEY as i16)
    }
}

/// Which index a reader (a replay's first read, a lookup) would read the table through as it stands now, or
/// why it would not read it.
/// For the tests.
#[cfg(any(test, feature = "pg_test"))]
pub fn check_read() -> Result<ReadIndex, Decline> {
    // SAFETY: opened and closed inside the calling transaction.
    unsafe {
        Reader::open(pg_sys::AccessShareLock as pg_sys::LOCKMODE).map(|reader| {
            let kind = reader.kind();
            reader.close();
            kind
        })
    }
}

/// Whether the direct path would write the table as it stands now, and with how many arbiter indexes; or
/// why not. For the tests.
#[cfg(any(test, feature = "pg_test"))]
pub fn check() -> Result<usize, Decline> {
    // SAFETY: opened and closed inside the calling transaction.
    unsafe {
        Table::open(true, &[]).map(|table| {
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
