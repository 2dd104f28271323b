//! Reading a row by (scope, key), through one index: which one (`ReadIndex`), whether an index is the hash
//! index sql/bootstrap.sql creates (`is_key_hash_index`), and the scan itself (`fetch_by_key`).

use super::row::{col, text};
use crate::compat;
use pgrx::pg_sys;
use std::ptr;

/// Which index a read by key goes through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ReadIndex {
    /// `idem_keys_key_hash_idx`, a hash of `scope || key`: one bucket page instead of a btree descent,
    /// whose collation-aware comparisons at every level are most of a replay's own cost (docs/benchmarks.md).
    /// Its entries hold only the hash, so each row it leads to is checked on scope and key.
    Hash,
    /// The primary key, when the hash index is gone, not valid, or of another shape (`is_key_hash_index`).
    Primary,
}

/// The index a table's reads by key use, open.
#[derive(Clone, Copy)]
pub struct KeyIndex {
    pub index: pg_sys::Relation,
    pub kind: ReadIndex,
}

impl KeyIndex {
    pub fn primary(index: pg_sys::Relation) -> KeyIndex {
        KeyIndex {
            index,
            kind: ReadIndex::Primary,
        }
    }

    pub fn hash(index: pg_sys::Relation) -> KeyIndex {
        KeyIndex {
            index,
            kind: ReadIndex::Hash,
        }
    }
}

/// The hash index's value for a row: `scope || key`, as a text datum in the current memory context. Its
/// scans and the entries writes insert (`Table::insert_hash_entry`) both come from here.
pub fn hash_value(scope: &[u8], key: &[u8]) -> pg_sys::Datum {
    let size = pg_sys::VARHDRSZ + scope.len() + key.len();
    // SAFETY: a palloc'd text of `size` bytes, its header set and both parts copied in after it.
    unsafe {
        let text = pg_sys::palloc(size).cast::<pg_sys::varlena>();
        pgrx::varlena::set_varsize_4b(text, size as i32);
        let data = text.cast::<u8>().add(pg_sys::VARHDRSZ);
        std::ptr::copy_nonoverlapping(scope.as_ptr(), data, scope.len());
        std::ptr::copy_nonoverlapping(key.as_ptr(), data.add(scope.len()), key.len());
        pg_sys::Datum::from(text)
    }
}

/// How many rows of other keys a read through the hash index passes before it gives up on the index. Rows
/// share a hash when their scope || key is the same text (('shop1', '23') and ('shop12', '3')), or by a
/// collision of the 32-bit hash, which a client that picks its keys can provoke on purpose; past this bound
/// the read goes through the primary key, whose cost no choice of keys changes.
pub const MAX_OTHER_ROWS: usize = 8;

/// What a read by key found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fetched {
    /// The key's row, in the slot.
    Found,
    /// No row of the key that the snapshot sees.
    Absent,
    /// More than `MAX_OTHER_ROWS` rows of other keys share its hash: read through the primary key instead.
    Crowded,
}

/// Equality scan keys on the primary key (scope, key), with the index's collations.
///
/// # Safety
/// `pkey` is the open primary key.
unsafe fn key_scan(pkey: pg_sys::Relation, scope: &str, key: &str) -> [pg_sys::ScanKeyData; 2] {
    unsafe {
        let mut keys = [pg_sys::ScanKeyData::default(); 2];
        for (i, value) in [scope, key].into_iter().enumerate() {
            pg_sys::ScanKeyEntryInitialize(
                &mut keys[i],
                0,
                (i + 1) as pg_sys::AttrNumber,
                pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
                pg_sys::InvalidOid,
                *(*pkey).rd_indcollation.add(i),
                pg_sys::Oid::from(pg_sys::F_TEXTEQ),
                text(value),
            );
        }
        keys
    }
}

/// The version of the key's row `snapshot` sees, through `read_by`, into `slot`. Never `Crowded` through
/// the primary key.
///
/// # Safety
/// `rel` and `read_by` (one of its indexes) are open; `slot` is a slot of `rel`.
pub unsafe fn fetch_by_key(
    rel: pg_sys::Relation,
    read_by: KeyIndex,
    scope: &str,
    key: &str,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
) -> Fetched {
    // The primary key gives at most one version an MVCC snapshot sees: the first is the one.
    unsafe { scan_by_key(rel, read_by, scope, key, snapshot, slot, || false) }
}

/// Every version of the key's row `snapshot` sees, through `read_by`, each in turn in `slot` while `more`
/// looks at it and says whether to go on. A non-MVCC snapshot (a dirty read) may see several: the index
/// scan then also walks each HOT chain.
///
/// # Safety
/// As for `fetch_by_key`.
pub unsafe fn scan_by_key(
    rel: pg_sys::Relation,
    read_by: KeyIndex,
    scope: &str,
    key: &str,
    snapshot: pg_sys::Snapshot,
    slot: *mut pg_sys::TupleTableSlot,
    mut more: impl FnMut() -> bool,
) -> Fetched {
    unsafe {
        let (mut keys, count) = match read_by.kind {
            ReadIndex::Primary => (key_scan(read_by.index, scope, key), 2),
            ReadIndex::Hash => (
                [hash_scan(read_by.index, scope, key), Default::default()],
                1,
            ),
        };
        let scan = compat::index_beginscan(rel, read_by.index, snapshot, count);
        pg_sys::index_rescan(scan, keys.as_mut_ptr(), count, ptr::null_mut(), 0);
        let mut fetched = Fetched::Absent;
        let mut others = 0;
        // The hash index gives every row whose scope || key hashes alike (see MAX_OTHER_ROWS).
        while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
            if read_by.kind == ReadIndex::Primary || holds_key(slot, scope, key) {
                fetched = Fetched::Found;
                if !more() {
                    break;
                }
                continue;
            }
            others += 1;
            if others > MAX_OTHER_ROWS {
                fetched = Fetched::Crowded;
                break;
            }
        }
        pg_sys::index_endscan(scan);
        fetched
    }
}

/// An equality scan key on the hash index: the hash AM hashes `scope || key` with the index's own support
/// function and collation, as it did each row's on insert.
///
/// # Safety
/// `hash` is the open hash index (`is_key_hash_index`).
unsafe fn hash_scan(hash: pg_sys::Relation, scope: &str, key: &str) -> pg_sys::ScanKeyData {
    unsafe {
        let mut entry = pg_sys::ScanKeyData::default();
        pg_sys::ScanKeyEntryInitialize(
            &mut entry,
            0,
            1,
            pg_sys::HTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::InvalidOid,
            *(*hash).rd_indcollation,
            pg_sys::Oid::from(pg_sys::F_TEXTEQ),
            hash_value(scope.as_bytes(), key.as_bytes()),
        );
        entry
    }
}

/// Whether the row in `slot` is the key's: the same scope and key, byte for byte (which is what the
/// columns' C collation calls equal).
///
/// # Safety
/// `slot` holds a row of `idem_keys`.
unsafe fn holds_key(slot: *mut pg_sys::TupleTableSlot, scope: &str, key: &str) -> bool {
    unsafe {
        pg_sys::slot_getallattrs(slot);
        let values = std::slice::from_raw_parts((*slot).tts_values, 2);
        text_bytes(values[col::SCOPE - 1]) == scope.as_bytes()
            && text_bytes(values[col::KEY - 1]) == key.as_bytes()
    }
}

/// A text datum's bytes (scope and key are NOT NULL), detoasted if it has to be.
///
/// # Safety
/// `value` is a text datum that lives while the result is used.
pub unsafe fn text_bytes<'a>(value: pg_sys::Datum) -> &'a [u8] {
    unsafe {
        let packed = pg_sys::pg_detoast_datum_packed(value.cast_mut_ptr());
        pgrx::varlena::varlena_to_byte_slice(packed)
    }
}

/// The hash operator family of text (pg_opfamily.dat; pgrx names no constant for it).
const TEXT_HASH_FAM_OID: pg_sys::Oid = pg_sys::Oid::from_u32(1995);

/// Whether `index` is the hash index reads by key may go through: a valid hash index on the one expression
/// `scope || key` (sql/bootstrap.sql's idem_keys_key_hash_idx, under any name), with the default text
/// operator family, the C collation (the columns'), and no predicate. A hash index of any other shape
/// could lack rows, or hash something else: reads then go through the primary key.
///
/// # Safety
/// `index` is an open index relation.
pub unsafe fn is_key_hash_index(index: pg_sys::Relation) -> bool {
    unsafe {
        let form = &*(*index).rd_index;
        // The cheap fields first: this runs for every index of the table on every write.
        let shape = (*(*index).rd_rel).relam == pg_sys::HASH_AM_OID
            && form.indnatts == 1
            && form.indkey.values.as_slice(1) == [0]
            && form.indisvalid
            && *(*index).rd_opfamily == TEXT_HASH_FAM_OID
            && *(*index).rd_indcollation == pg_sys::C_COLLATION_OID;
        shape
            && pg_sys::heap_attisnull(
                (*index).rd_indextuple,
                pg_sys::Anum_pg_index_indpred as i32,
                ptr::null_mut(),
            )
            && is_scope_concat_key(pg_sys::RelationGetIndexExpressions(index))
    }
}

/// Whether an index's expression list is exactly `scope || key`: text concatenation of the two columns.
///
/// # Safety
/// `exprs` is an index's expression list (RelationGetIndexExpressions).
unsafe fn is_scope_concat_key(exprs: *mut pg_sys::List) -> bool {
    unsafe {
        if exprs.is_null() || (*exprs).length != 1 {
            return false;
        }
        let node = pg_sys::list_nth(exprs, 0) as *mut pg_sys::Node;
        if !pgrx::is_a(node, pg_sys::NodeTag::T_OpExpr) {
            return false;
        }
        let op = &*(node as *mut pg_sys::OpExpr);
        if op.opfuncid != pg_sys::Oid::from(pg_sys::F_TEXTCAT)
            || op.args.is_null()
            || (*op.args).length != 2
        {
            return false;
        }
        [col::SCOPE, col::KEY]
            .iter()
            .enumerate()
            .all(|(i, &column)| {
                let arg = pg_sys::list_nth(op.args, i as i32) as *mut pg_sys::Node;
                pgrx::is_a(arg, pg_sys::NodeTag::T_Var) && {
                    let var = &*(arg as *mut pg_sys::Var);
                    var.varattno == column as i16 && var.vartype == pg_sys::TEXTOID
                }
            })
    }
}
