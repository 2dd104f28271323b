//! Whether the direct path may touch `idem_keys` as it stands: the table and its indexes must still be
//! exactly what sql/bootstrap.sql creates (`check_table`, `key_indexes`); for anything else the direct path
//! declines (`Decline`) and the caller runs the SPI statement, which honours whatever a DBA changed. A
//! full check's result is kept per relcache generation (`remember`, `verified_in`), so a replay's reader
//! skips it until the table changes.

use super::by_key::{is_key_hash_index, KeyIndex, ReadIndex};
use super::row::{col, COLUMNS};
use crate::catalog;
use crate::compat;
use pgrx::pg_sys;
use std::cell::RefCell;
use std::ptr;

/// Why the direct path left a call to SPI. Each is something the executor would honour and this file does
/// not; `idem_keys.direct_path = off` gives the same answers (tests/pg_regress/sql/direct_declines.sql).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Decline {
    /// The extension's table is not there (SPI raises the proper error), or was dropped or changed while
    /// it was being opened.
    NotFound,
    /// Citus distributes the table and the scope's shard is not on this node (the coordinator holds none;
    /// a move took it away), or this call runs inside a transaction block, where Citus must see every
    /// access to a shard: the statement runs and Citus routes it.
    Elsewhere,
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

/// What a full open last found a table to be: the index a reader may use alone (`KeyIndex`), for the user
/// the checks ran as, in the relcache generation they ran in (`catalog::generation`). Every change `check_table`
/// or `key_indexes` looks at (a trigger, a column, an index, row security, the owner, inheritance) updates
/// the table's pg_class row or invalidates its relcache entry, and so bumps the generation. One per table: on
/// a Citus worker the calls go to the several shards it holds, each verified once.
#[derive(Clone, Copy)]
struct Verified {
    generation: u64,
    /// The table checked: the extension's, or on a Citus worker the shard the call writes.
    table: pg_sys::Oid,
    user: pg_sys::Oid,
    read_by: pg_sys::Oid,
    kind: ReadIndex,
}

thread_local! {
    static VERIFIED: RefCell<Vec<Verified>> = const { RefCell::new(Vec::new()) };
}

/// More shards than a worker of a large Citus cluster holds of one table (Citus's default is 32 in all).
const MAX_VERIFIED: usize = 256;

/// The index a reader may use alone, if a full open verified `table` in relcache generation `generation`
/// for the current user.
pub(super) fn verified_in(generation: u64, table: pg_sys::Oid) -> Option<(pg_sys::Oid, ReadIndex)> {
    // SAFETY: a plain read of the backend's current user.
    let user = unsafe { pg_sys::GetUserId() };
    VERIFIED.with_borrow(|verified| {
        verified
            .iter()
            .find(|v| v.generation == generation && v.table == table && v.user == user)
            .map(|v| (v.read_by, v.kind))
    })
}

/// Opens the table that holds `scope`'s rows with `lock`: the extension's own, or on a node of a Citus
/// cluster the scope's shard when this node holds it (`citus::local_shard`). With the names it was found by
/// and the relcache generation after the lock was taken.
///
/// # Safety
/// Inside a transaction; the relation must be closed (or the transaction aborted).
pub(super) unsafe fn open_relation(
    scope: &str,
    lock: pg_sys::LOCKMODE,
) -> Result<(pg_sys::Relation, catalog::Names, u64), Decline> {
    unsafe {
        let found = catalog::names().ok_or(Decline::NotFound)?;
        let table = if found.distributed {
            // Inside a transaction block Citus may already reach this shard through a connection of its
            // own, which would not see a write made here.
            if pg_sys::IsTransactionBlock() {
                return Err(Decline::Elsewhere);
            }
            crate::citus::local_shard(&found, scope).ok_or(Decline::Elsewhere)?
        } else {
            found.table
        };
        let rel = pg_sys::try_table_open(table, lock);
        if rel.is_null() {
            // Dropped since we looked it up (DROP EXTENSION in a concurrent session): look again next
            // time; SPI raises the usual error now.
            catalog::forget();
            return Err(Decline::NotFound);
        }
        // Locking processed pending invalidations: if they were about our relations, look the names up
        // again, and leave this call to SPI if they changed (the sequence alone recreated, say). A change
        // to the table's shape has bumped the generation.
        let generation = catalog::generation();
        if catalog::names() != Some(found) {
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
pub(super) unsafe fn remember(generation: u64, read_by: KeyIndex) {
    let new = unsafe {
        Verified {
            generation,
            table: (*(*read_by.index).rd_index).indrelid,
            user: pg_sys::GetUserId(),
            read_by: (*(*read_by.index).rd_index).indexrelid,
            kind: read_by.kind,
        }
    };
    VERIFIED.with_borrow_mut(|verified| {
        // What an older generation verified may no longer hold; this table's entry is replaced.
        verified.retain(|v| v.generation == generation && v.table != new.table);
        if verified.len() == MAX_VERIFIED {
            verified.remove(0);
        }
        verified.push(new);
    });
}

/// `key_indexes` for a reader: opens every index of the table with `lock`, and returns the OID of the index
/// reads by key go through, if the direct path may use the table.
///
/// # Safety
/// `rel` is open with `lock`.
pub(super) unsafe fn verify_indexes(
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
        let index = (*(*index).rd_index).indexrelid;
        let generation = catalog::generation();
        VERIFIED.with_borrow(|verified| {
            verified.iter().any(|v| {
                v.kind == ReadIndex::Hash && v.read_by == index && v.generation == generation
            })
        })
    }
}

/// Finds the primary key among the table's open indexes, checks its shape, picks the index reads by key go
/// through (the hash index if there is one of its shape, else the primary key), and lists the arbiters
/// (see `Table::arbiters`), in the executor's memory context.
///
/// # Safety
/// Every index is open.
pub(super) unsafe fn key_indexes(
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
pub(super) unsafe fn check_table(rel: pg_sys::Relation) -> Result<(), Decline> {
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
                let column = compat::attribute(desc, i);
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
