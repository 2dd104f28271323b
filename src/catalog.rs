//! Where the extension lives: its schema, its table and its token sequence, found by catalog OIDs and never
//! through the caller's `search_path`, and the pinned `search_path` its SQL statements run under.
//!
//! The hot verbs (`idem_claim`, `idem_finish`, `idem_lookup`) are SECURITY DEFINER C functions without a
//! `SET search_path` clause: that clause costs a GUC save and restore on every call (4.6 % of a replay's
//! samples, docs/benchmarks.md), and the direct path names no object by search path. So the pin moves to
//! where SQL runs: `store::with_spi` pins `pg_catalog, <this schema>, pg_temp` around every statement, as the
//! clause did, and the direct path opens the table by the OID this module finds in the extension's schema.
//! A caller's `search_path` (a schema of its own first, `pg_temp` first) therefore reaches nothing here;
//! src/tests/security.rs tries both.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::ptr;

/// The OIDs of the extension's schema, table and token sequence.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Names {
    pub schema: pg_sys::Oid,
    pub table: pg_sys::Oid,
    pub sequence: pg_sys::Oid,
    /// Citus distributes the table: its rows live in shards (tables of other names, on the workers), and
    /// this node's `idem_keys` is an empty shell that only Citus's planner knows how to reach through. The
    /// direct path opens the scope's shard instead, when this node holds it (`citus::local_shard`); else SQL
    /// statements run, and Citus routes them.
    pub distributed: bool,
}

thread_local! {
    // Looked up once per backend instead of on every call (1.1 % of a new-key cycle's samples), and
    // forgotten whenever the relcache reports a change to the table or the sequence (DROP or ALTER
    // EXTENSION, VACUUM's statistics update) or resets itself.
    static NAMES: Cell<Option<Names>> = const { Cell::new(None) };
    // Bumped on every forget, so that caches built on the table's shape (`direct::table`) know to rebuild.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// None while the extension is not installed in this database (or is being dropped).
pub fn names() -> Option<Names> {
    if let Some(names) = NAMES.get() {
        return Some(names);
    }
    // SAFETY: catalog lookups inside a transaction; the callback is registered once per backend.
    unsafe {
        if !CALLBACK_REGISTERED.get() {
            pg_sys::CacheRegisterRelcacheCallback(Some(forget_names), pg_sys::Datum::from(0));
            CALLBACK_REGISTERED.set(true);
        }
        let schema = extension_schema()?;
        let table = pg_sys::get_relname_relid(c"idem_keys".as_ptr(), schema);
        let sequence = pg_sys::get_relname_relid(c"idem_keys_token_seq".as_ptr(), schema);
        if table == pg_sys::InvalidOid || sequence == pg_sys::InvalidOid {
            return None;
        }
        let names = Names {
            schema,
            table,
            sequence,
            distributed: distributed_by_citus(table),
        };
        NAMES.set(Some(names));
        Some(names)
    }
}

/// Changes whenever the cached names are forgotten: anything derived from the table's relcache entry and
/// tagged with an older generation is stale.
pub fn generation() -> u64 {
    GENERATION.get()
}

/// Forgets the names now (the table was found dropped under us).
pub fn forget() {
    NAMES.set(None);
    GENERATION.set(GENERATION.get().wrapping_add(1));
}

/// The relcache callback: forgets the names when either relation (or the whole relcache) is invalidated.
///
/// # Safety
/// Called by PostgreSQL's invalidation machinery only; it touches nothing but this backend's cache.
#[pg_guard]
unsafe extern "C-unwind" fn forget_names(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if let Some(names) = NAMES.get() {
        if relid == pg_sys::InvalidOid || relid == names.table || relid == names.sequence {
            forget();
        }
    }
}

/// Whether Citus's metadata lists `table` as one of its tables (a row in `pg_dist_partition`), on the
/// coordinator or on a worker. Citus invalidates the table's relcache entry when it adds that row, so the
/// cached names are looked up again then. Without Citus in this database, one syscache lookup.
///
/// # Safety
/// Inside a transaction.
unsafe fn distributed_by_citus(table: pg_sys::Oid) -> bool {
    unsafe {
        if pg_sys::get_extension_oid(c"citus".as_ptr(), true) == pg_sys::InvalidOid {
            return false;
        }
        let partitions = pg_sys::get_relname_relid(
            c"pg_dist_partition".as_ptr(),
            pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE),
        );
        if partitions == pg_sys::InvalidOid {
            return false;
        }
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let catalog = pg_sys::table_open(partitions, lock);
        let mut key = pg_sys::ScanKeyData::default();
        // pg_dist_partition.logicalrelid, its first column (a regclass, compared as an oid)
        pg_sys::ScanKeyInit(
            &mut key,
            1,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_OIDEQ),
            pg_sys::Datum::from(table),
        );
        // A heap scan: the catalog has a row per Citus table, and this runs once per backend.
        let scan = pg_sys::systable_beginscan(
            catalog,
            pg_sys::InvalidOid,
            false,
            ptr::null_mut(),
            1,
            &mut key,
        );
        let found = !pg_sys::systable_getnext(scan).is_null();
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(catalog, lock);
        found
    }
}

/// The schema of the extension `idem_keys`, read from pg_extension by its unique name index.
///
/// # Safety
/// Inside a transaction.
unsafe fn extension_schema() -> Option<pg_sys::Oid> {
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let catalog = pg_sys::table_open(pg_sys::ExtensionRelationId, lock);
        let mut key = pg_sys::ScanKeyData::default();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_extension_extname as pg_sys::AttrNumber,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_NAMEEQ),
            pg_sys::Datum::from(c"idem_keys".as_ptr()),
        );
        let scan = pg_sys::systable_beginscan(
            catalog,
            pg_sys::Oid::from(pg_sys::ExtensionNameIndexId),
            true,
            ptr::null_mut(),
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let schema = (!tuple.is_null()).then(|| {
            (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_extension>(tuple)).extnamespace
        });
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(catalog, lock);
        schema
    }
}

/// `pg_catalog, <extension schema>, pg_temp`, with the schema quoted as an identifier: what the functions'
/// `SET search_path` clause said before 0.4.0, and what the SQL-language functions still say.
pub fn pinned_search_path() -> CString {
    let Some(names) = names() else {
        // Every caller is a function of the extension, so it is installed; this is a dropped-under-us race.
        pgrx::error!("idem_keys: the extension is not installed in this database");
    };
    // SAFETY: syscache lookup of an existing namespace; quote_identifier returns its argument or a palloc'd
    // copy, both valid C strings until the end of the call.
    unsafe {
        let name = pg_sys::get_namespace_name(names.schema);
        if name.is_null() {
            pgrx::error!("idem_keys: the extension's schema is gone");
        }
        let quoted = CStr::from_ptr(pg_sys::quote_identifier(name));
        let mut path = b"pg_catalog, ".to_vec();
        path.extend_from_slice(quoted.to_bytes());
        path.extend_from_slice(b", pg_temp");
        CString::new(path).expect("identifiers hold no NUL")
    }
}
