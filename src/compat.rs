//! The crate's only code that differs between PostgreSQL releases, the variants side by side; callers see
//! one signature and never a `cfg`.
//!
//! Between majors, one wrapper per executor primitive whose signature or data structure changed (16 shares
//! 17's code):
//!
//! | primitive                  | 15                    | 16, 17                           | 18                           |
//! |----------------------------|-----------------------|----------------------------------|------------------------------|
//! | range table                | `rte.updatedCols`     | `RTEPermissionInfo`, `permInfos` | + `unpruned_relids`          |
//! | `ExecInsertIndexTuples`    | 7 arguments           | + `onlySummarizing`              | as 16                        |
//! | `table_tuple_update`       | `update_indexes: bool`| `TU_UpdateIndexes`               | as 16                        |
//! | `index_beginscan`          | 5 arguments           | as 15                            | + `instrument`               |
//! | tuple descriptor attribute | `attrs[i]`            | as 15                            | `TupleDescAttr(desc, i)`     |
//! | text that may not parse    | a subtransaction      | soft errors (`ErrorSaveContext`) | as 16                        |
//!
//! Between minor releases of one major, WalSndCtl's synchronous-standby byte (`sync_standbys_defined`): a
//! library built against one minor's headers is loaded by any minor of its major, so this is decided by the
//! running server's version, not at build time.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ptr;

/// Which index entries an updated tuple needs (TU_UpdateIndexes on 16+; a bool on 15).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IndexUpdate {
    /// A HOT update: no new index entries.
    None,
    /// Every index gets an entry for the new version.
    All,
    /// HOT, but summarizing indexes (BRIN) still need one (16+): `onlySummarizing`.
    #[cfg_attr(feature = "pg15", allow(dead_code))]
    Summarizing,
}

/// Sets up the estate's range table with the one relation a claim or finish writes, as the planner would:
/// relation `relid`, locked in `lock`, with `updated_columns` (1-based) as the UPDATE's target list.
///
/// On 16+ the columns live in an `RTEPermissionInfo` that the entry points to (`perminfoindex = 1`): without
/// one, `ExecGetUpdatedCols` raises "invalid perminfoindex 0" on every update.
///
/// # Safety
/// `estate` is a fresh executor state whose query context is current; `relid` is a table opened in `lock`.
pub unsafe fn init_range_table(
    estate: *mut pg_sys::EState,
    relid: pg_sys::Oid,
    lock: pg_sys::LOCKMODE,
    updated_columns: &[usize],
) {
    unsafe {
        let rte =
            PgBox::<pg_sys::RangeTblEntry>::alloc_node(pg_sys::NodeTag::T_RangeTblEntry).into_pg();
        (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
        (*rte).relid = relid;
        (*rte).relkind = pg_sys::RELKIND_RELATION as _;
        (*rte).rellockmode = lock;
        let mut updated: *mut pg_sys::Bitmapset = ptr::null_mut();
        for &column in updated_columns {
            let member = column as i32 - pg_sys::FirstLowInvalidHeapAttributeNumber;
            updated = pg_sys::bms_add_member(updated, member);
        }
        let rtable = pg_sys::lappend(ptr::null_mut(), rte.cast());

        #[cfg(feature = "pg15")]
        {
            (*rte).requiredPerms =
                (pg_sys::ACL_INSERT | pg_sys::ACL_SELECT | pg_sys::ACL_UPDATE) as _;
            (*rte).updatedCols = updated;
            pg_sys::ExecInitRangeTable(estate, rtable);
        }
        #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
        {
            let perm = PgBox::<pg_sys::RTEPermissionInfo>::alloc_node(
                pg_sys::NodeTag::T_RTEPermissionInfo,
            )
            .into_pg();
            (*perm).relid = relid;
            (*perm).requiredPerms =
                (pg_sys::ACL_INSERT | pg_sys::ACL_SELECT | pg_sys::ACL_UPDATE) as _;
            (*perm).updatedCols = updated;
            (*rte).perminfoindex = 1;
            let perm_infos = pg_sys::lappend(ptr::null_mut(), perm.cast());
            #[cfg(any(feature = "pg16", feature = "pg17"))]
            pg_sys::ExecInitRangeTable(estate, rtable, perm_infos);
            // 18: the relations that survived initial partition pruning; ours is the only one, index 1.
            #[cfg(feature = "pg18")]
            pg_sys::ExecInitRangeTable(estate, rtable, perm_infos, pg_sys::bms_make_singleton(1));
        }
    }
}

/// `ExecInsertIndexTuples`: index entries for the tuple in `slot`. `update` says it is a new version of
/// an updated row (for the "unchanged" hint); `spec_conflict`/`arbiters` are a speculative insertion's;
/// `which` is `All` for an insert. Returns the list of indexes needing a recheck, which we free.
///
/// # Safety
/// `rri` has its indexes open (ExecOpenIndices, with speculative = true for a speculative insertion);
/// `slot` holds the new tuple; `spec_conflict` is null or points to a bool.
pub unsafe fn insert_index_tuples(
    rri: *mut pg_sys::ResultRelInfo,
    slot: *mut pg_sys::TupleTableSlot,
    estate: *mut pg_sys::EState,
    update: bool,
    spec_conflict: *mut bool,
    arbiters: *mut pg_sys::List,
    which: IndexUpdate,
) {
    unsafe {
        let speculative = !spec_conflict.is_null();
        #[cfg(feature = "pg15")]
        let recheck = {
            debug_assert!(
                which == IndexUpdate::All,
                "15 has no summarizing-only index inserts"
            );
            pg_sys::ExecInsertIndexTuples(
                rri,
                slot,
                estate,
                update,
                speculative,
                spec_conflict,
                arbiters,
            )
        };
        #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
        let recheck = pg_sys::ExecInsertIndexTuples(
            rri,
            slot,
            estate,
            update,
            speculative,
            spec_conflict,
            arbiters,
            which == IndexUpdate::Summarizing,
        );
        pg_sys::list_free(recheck);
    }
}

/// What `table_tuple_update` reports about index entries: a bool on 15, `TU_UpdateIndexes` on 16+.
#[cfg(feature = "pg15")]
type UpdateIndexes = bool;
#[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
type UpdateIndexes = pg_sys::TU_UpdateIndexes::Type;

fn index_update(reported: UpdateIndexes) -> IndexUpdate {
    #[cfg(feature = "pg15")]
    return if reported {
        IndexUpdate::All
    } else {
        IndexUpdate::None
    };
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    return match reported {
        pg_sys::TU_UpdateIndexes::TU_None => IndexUpdate::None,
        pg_sys::TU_UpdateIndexes::TU_Summarizing => IndexUpdate::Summarizing,
        _ => IndexUpdate::All,
    };
}

/// `table_tuple_update` with `wait = true` and no crosscheck snapshot: the result, and which index entries
/// the new version needs when it is `TM_Ok`.
///
/// # Safety
/// `otid` is a version of a row of `rel` that `snapshot` sees; `slot` holds the new tuple.
pub unsafe fn tuple_update(
    rel: pg_sys::Relation,
    otid: *mut pg_sys::ItemPointerData,
    slot: *mut pg_sys::TupleTableSlot,
    cid: pg_sys::CommandId,
    snapshot: pg_sys::Snapshot,
) -> (pg_sys::TM_Result::Type, IndexUpdate) {
    unsafe {
        let mut failure = pg_sys::TM_FailureData::default();
        let mut lock_mode: pg_sys::LockTupleMode::Type = 0;
        // false on 15, TU_None (0) on 16+.
        let mut reported = UpdateIndexes::default();
        let result = pg_sys::table_tuple_update(
            rel,
            otid,
            slot,
            cid,
            snapshot,
            ptr::null_mut(),
            true,
            &mut failure,
            &mut lock_mode,
            &mut reported,
        );
        (result, index_update(reported))
    }
}

/// `index_beginscan` without instrumentation (18's extra argument).
///
/// # Safety
/// `heap` and `index` are open, `index` is an index of `heap`.
pub unsafe fn index_beginscan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
) -> pg_sys::IndexScanDesc {
    unsafe {
        #[cfg(not(feature = "pg18"))]
        return pg_sys::index_beginscan(heap, index, snapshot, nkeys, 0);
        #[cfg(feature = "pg18")]
        return pg_sys::index_beginscan(heap, index, snapshot, ptr::null_mut(), nkeys, 0);
    }
}

/// The `i`-th (0-based) attribute of a tuple descriptor (18 moved them behind `compact_attrs`).
///
/// # Safety
/// `desc` is a valid tuple descriptor and `i < desc.natts`.
pub unsafe fn attribute<'a>(
    desc: pg_sys::TupleDesc,
    i: usize,
) -> &'a pg_sys::FormData_pg_attribute {
    unsafe {
        #[cfg(not(feature = "pg18"))]
        return &(*desc).attrs.as_slice(i + 1)[i];
        #[cfg(feature = "pg18")]
        return &*pg_sys::TupleDescAttr(desc, i as i32);
    }
}

/// Whether synchronous_standby_names names any standby. The checkpointer publishes it in WalSndCtl; until it
/// has (right after a start, exactly when this module matters), the backend's own setting decides, as
/// SyncRepWaitForLSN does.
///
/// # Safety
/// `ctl` is WalSndCtl.
pub unsafe fn sync_standbys_defined(ctl: *mut pg_sys::WalSndCtlData) -> bool {
    unsafe {
        let names_set = || {
            let names = pg_sys::SyncRepStandbyNames;
            !names.is_null() && *names != 0
        };
        let published = std::ptr::read_volatile(sync_standbys_byte(ctl));
        if !server_has_status_bits() {
            // A bare boolean, false until the checkpointer has published: waiting on the backend's own
            // setting meanwhile is what the later minors do, and never serves an unconfirmed answer.
            return published != 0 || names_set();
        }
        if published & SYNC_STANDBY_INIT == 0 {
            return names_set();
        }
        published & SYNC_STANDBY_DEFINED != 0
    }
}

/// The status bits of the minor releases that have them (syncrep.h's SYNC_STANDBY_INIT and
/// SYNC_STANDBY_DEFINED), spelled out here because headers of an older minor do not define them.
const SYNC_STANDBY_INIT: u8 = 1 << 0;
const SYNC_STANDBY_DEFINED: u8 = 1 << 1;

/// WalSndCtl's byte that says whether synchronous standbys are defined. The minor releases of May 2025
/// (13.21, 14.18, 15.13, 16.9, 17.5; 18 from the start) turned the boolean `sync_standbys_defined` into the
/// status bits `sync_standbys_status`: the same single byte, right after `lsn`, with other meanings. Which one
/// the headers this library was built against have says nothing about the server that loads it (any minor of
/// the same major may), so the byte is found without naming the field and read as the running server writes
/// it (`server_has_status_bits`).
///
/// # Safety
/// `ctl` is WalSndCtl.
unsafe fn sync_standbys_byte(ctl: *mut pg_sys::WalSndCtlData) -> *const u8 {
    unsafe {
        let lsn = std::ptr::addr_of!((*ctl).lsn);
        lsn.add(1).cast::<u8>()
    }
}

/// Whether the running server (not the headers this library was built against) writes status bits into
/// `sync_standbys_byte`: from `server_version_num`, once per backend.
fn server_has_status_bits() -> bool {
    thread_local! {
        static HAS_BITS: Cell<Option<bool>> = const { Cell::new(None) };
    }
    if let Some(known) = HAS_BITS.get() {
        return known;
    }
    let known = has_status_bits(running_server_version());
    HAS_BITS.set(Some(known));
    known
}

/// The first minor release of each major whose WalSndCtl has status bits.
fn has_status_bits(version_num: u32) -> bool {
    let first_with_bits = match version_num / 10_000 {
        ..=12 => return false,
        13 => 130_021,
        14 => 140_018,
        15 => 150_013,
        16 => 160_009,
        17 => 170_005,
        _ => return true,
    };
    version_num >= first_with_bits
}

/// `server_version_num` of the server this backend runs in.
fn running_server_version() -> u32 {
    // SAFETY: a built-in setting, always defined; GetConfigOption returns a pointer into its own storage.
    let text = unsafe { pg_sys::GetConfigOption(c"server_version_num".as_ptr(), false, false) };
    if text.is_null() {
        return pg_sys::PG_VERSION_NUM;
    }
    unsafe { std::ffi::CStr::from_ptr(text) }
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(pg_sys::PG_VERSION_NUM)
}

#[cfg(test)]
mod layout_tests {
    use super::has_status_bits;

    #[test]
    fn status_bits_arrive_with_the_minor_releases_of_may_2025() {
        for (version, bits) in [
            (150_012, false),
            (150_013, true),
            (150_020, true),
            (160_002, false),
            (160_008, false),
            (160_009, true),
            (170_004, false),
            (170_005, true),
            (180_000, true),
            (130_020, false),
            (130_021, true),
            (120_022, false),
        ] {
            assert_eq!(
                has_status_bits(version),
                bits,
                "server_version_num {version}"
            );
        }
    }
}

unsafe extern "C-unwind" {
    // The builtin jsonb input function, for fmgr.
    fn jsonb_in(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// `text` parsed as jsonb, or `None` where `jsonb_in` would raise (not JSON, a number out of numeric's
/// range, an escape the database encoding cannot hold). `text` is in the database encoding.
///
/// 16+ ask jsonb_in for a soft error; 15 has none, so the call runs in a subtransaction that is rolled back
/// on an error, as PL/pgSQL's exception blocks do (it writes nothing, so it takes no transaction id).
pub fn jsonb_parsed(text: &std::ffi::CStr) -> Option<pg_sys::Datum> {
    #[cfg(feature = "pg15")]
    // SAFETY: a subtransaction begun and ended here, the caller's memory context and resource owner put back
    // on both ways out; jsonb_in on a NUL-terminated string.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(ptr::null());
        pg_sys::CurrentMemoryContext = context;
        let restore = move || {
            pg_sys::CurrentMemoryContext = context;
            pg_sys::CurrentResourceOwner = owner;
        };
        PgTryBuilder::new(|| {
            let value = pg_sys::DirectFunctionCall1Coll(
                Some(jsonb_in),
                pg_sys::InvalidOid,
                pg_sys::Datum::from(text.as_ptr()),
            );
            pg_sys::ReleaseCurrentSubTransaction();
            restore();
            Some(value)
        })
        .catch_others(|_| {
            restore();
            pg_sys::FlushErrorState();
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
            restore();
            None
        })
        .execute()
    }
    #[cfg(any(feature = "pg16", feature = "pg17", feature = "pg18"))]
    // SAFETY: jsonb_in with an ErrorSaveContext: a syntax or range error is recorded there, not raised.
    unsafe {
        let mut saved = pg_sys::ErrorSaveContext {
            type_: pg_sys::NodeTag::T_ErrorSaveContext,
            ..Default::default()
        };
        let mut value = pg_sys::Datum::from(0);
        pg_sys::DirectInputFunctionCallSafe(
            Some(jsonb_in),
            text.as_ptr().cast_mut(),
            pg_sys::JSONBOID,
            -1,
            (&raw mut saved).cast(),
            &mut value,
        )
        .then_some(value)
    }
}
