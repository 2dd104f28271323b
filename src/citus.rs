//! What idem_keys needs to know on a node of a Citus cluster (docs/scale-out.md). There the table is
//! distributed by scope: its rows live in shards, tables named `idem_keys_<shard id>` on the workers, and
//! each node's own `idem_keys` is a shell that Citus's planner routes statements through. A keyed verb is
//! delegated to the worker that holds its scope's shard; there the direct path writes and reads that shard
//! itself (`local_shard`), and anywhere else the verb's SQL statements run and Citus routes them. The sweep,
//! which no scope names, runs on every worker over the shards that worker holds (`local_shards`).

use crate::catalog::Names;
use pgrx::prelude::*;
use pgrx::IntoDatum;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// The shards of the extension's table placed on this node, as schema-qualified quoted names, in shard
/// order: the sweep's list, from the same map as the direct path's (`shard_map`). A shard being copied here
/// by a move is not listed until Citus records its placement, so a sweep never deletes from a copy that is
/// still filling; Citus invalidates the map when it does.
pub fn local_shards(names: &Names) -> Vec<String> {
    shard_map(names)
        .shards
        .iter()
        .filter_map(|shard| shard.local)
        .filter_map(qualified_name)
        .collect()
}

/// `schema.table` of a relation, each part quoted as needed; `None` when it is gone.
fn qualified_name(relid: pg_sys::Oid) -> Option<String> {
    // SAFETY: catalog lookups by OID in a transaction; each returns NULL for a relation that is gone.
    unsafe {
        let relname = pg_sys::get_rel_name(relid);
        if relname.is_null() {
            return None;
        }
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(relid));
        if schema.is_null() {
            return None;
        }
        let quoted = pg_sys::quote_qualified_identifier(schema, relname);
        Some(
            std::ffi::CStr::from_ptr(quoted)
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// The shard that holds `scope`'s rows, if it is placed on this node: its relation, to write and read
/// directly (the direct path, src/direct), as Citus's own executor would through local execution. `None`:
/// the shard is elsewhere (this is the coordinator, or the shard moved away), or Citus's metadata here does
/// not say; the caller's SQL statements then go through Citus, which routes them.
///
/// It first takes the lock Citus's executor takes before it writes a shard (`LockShardDistributionMetadata`
/// in ShareLock; for a table in a co-location group, the group's shard-index tag): a shard move holds it in
/// ExclusiveLock on every node from the moment it blocks writes until it commits the new placement. Then it
/// reads the placement again: a call that waited out a move sees the shard gone and declines, so no write
/// lands in a shard that Citus no longer reads.
///
/// # Safety
/// Inside a transaction, on a node where Citus distributes `names.table`.
pub unsafe fn local_shard(names: &Names, scope: &str) -> Option<pg_sys::Oid> {
    unsafe {
        let hash = hash_of(scope);
        let shard = shard_map(names).find(hash)?;
        // Not here as far as this node knew: decline without the lock (the coordinator holds no shard). A
        // shard that has just arrived is found by the next call, once Citus's invalidation is read.
        shard.local?;
        let tag = metadata_tag(&shard);
        pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, false);
        // Whatever committed before the lock was granted (a move's new placement) is seen from here on.
        pg_sys::AcceptInvalidationMessages();
        let names = crate::catalog::names()?;
        let again = shard_map(&names).find(hash)?;
        (again.index == shard.index).then_some(again.local?)
    }
}

/// One shard of the distributed table, in the order of its hash range (Citus's shard index).
#[derive(Clone, Copy)]
struct Shard {
    id: i64,
    /// Its position in hash order, and the table's co-location group (0: none): with both, Citus names the
    /// lock of every co-located shard at that position at once.
    index: u32,
    colocation: u32,
    min: i32,
    max: i32,
    /// The shard's table, when this node holds a placement of it and the table is there.
    local: Option<pg_sys::Oid>,
}

struct ShardMap {
    /// `catalog::generation()` when the map was read: Citus invalidates the distributed table's relcache
    /// entry whenever a shard or a placement of it changes, and that bumps the generation (as a change of
    /// the extension's table itself does, so the map is always of `catalog::names()`'s table).
    generation: u64,
    shards: Vec<Shard>,
}

impl ShardMap {
    /// The shard whose hash range holds `hash`.
    fn find(&self, hash: i32) -> Option<Shard> {
        self.shards
            .iter()
            .find(|s| s.min <= hash && hash <= s.max)
            .copied()
    }
}

thread_local! {
    static SHARD_MAP: RefCell<Option<Rc<ShardMap>>> = const { RefCell::new(None) };
    static SHARD_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// This node's view of the table's shards, read once and again after Citus (or DDL on a shard) changes it.
fn shard_map(names: &Names) -> Rc<ShardMap> {
    let generation = crate::catalog::generation();
    if let Some(map) = SHARD_MAP.with_borrow(|map| map.clone()) {
        if map.generation == generation {
            return map;
        }
    }
    if !SHARD_CALLBACK.get() {
        // SAFETY: registered once per backend; the callback only reads this backend's map.
        unsafe {
            pg_sys::CacheRegisterRelcacheCallback(Some(forget_on_shard), pg_sys::Datum::from(0))
        };
        SHARD_CALLBACK.set(true);
    }
    let map = Rc::new(read_shard_map(names.table, generation));
    SHARD_MAP.with_borrow_mut(|cached| *cached = Some(map.clone()));
    map
}

/// The relcache callback: a change to a local shard's table (an index added on it, the table dropped after a
/// move) makes the direct path check its shape again, as a change to the table does.
///
/// # Safety
/// Called by PostgreSQL's invalidation machinery only.
#[pg_guard]
unsafe extern "C-unwind" fn forget_on_shard(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let ours = SHARD_MAP.with_borrow(|map| {
        map.as_ref()
            .is_some_and(|map| map.shards.iter().any(|s| s.local == Some(relid)))
    });
    if ours {
        crate::catalog::forget();
    }
}

fn read_shard_map(table: pg_sys::Oid, generation: u64) -> ShardMap {
    // Citus's hash ranges are int4 bounds stored as text; the shard index is the position in min order.
    const SHARDS: &str = "
        SELECT s.shardid, s.shardminvalue::int4, s.shardmaxvalue::int4, d.colocationid::int4,
               CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_dist_placement AS p
                                  WHERE p.shardid = s.shardid AND p.shardstate = 1
                                    AND p.groupid = (SELECT g.groupid FROM pg_catalog.pg_dist_local_group AS g))
                    THEN pg_catalog.to_regclass(pg_catalog.format('%I.%I', n.nspname, t.relname || '_' || s.shardid))::oid
               END
          FROM pg_catalog.pg_dist_shard AS s
          JOIN pg_catalog.pg_dist_partition AS d ON d.logicalrelid = s.logicalrelid AND d.partmethod = 'h'
          JOIN pg_catalog.pg_class AS t ON t.oid = s.logicalrelid
          JOIN pg_catalog.pg_namespace AS n ON n.oid = t.relnamespace
         WHERE s.logicalrelid = $1
         ORDER BY s.shardminvalue::int4";
    let mut map = ShardMap {
        generation,
        shards: Vec::new(),
    };
    crate::store::with_spi(|client| {
        let rows = client
            .select(SHARDS, None, &[crate::store::oid(table)])
            .unwrap_or_else(|e| pgrx::error!("idem_keys: reading Citus's shards: {e}"));
        for row in rows {
            let (Ok(Some(id)), Ok(Some(min)), Ok(Some(max)), Ok(Some(colocation))) = (
                row.get::<i64>(1),
                row.get::<i32>(2),
                row.get::<i32>(3),
                row.get::<i32>(4),
            ) else {
                continue;
            };
            map.shards.push(Shard {
                id,
                index: map.shards.len() as u32,
                colocation: colocation as u32,
                min,
                max,
                local: row.get::<pg_sys::Oid>(5).ok().flatten(),
            });
        }
    });
    map
}

unsafe extern "C-unwind" {
    // The builtin itself, for fmgr (pg_sys's binding is a guarded Rust function, not a PGFunction).
    #[link_name = "hashtext"]
    fn hashtext_fmgr(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// The hash Citus places a scope by: the text type's hash support function, under the column's collation
/// ("C", deterministic, so the hash of the bytes).
fn hash_of(scope: &str) -> i32 {
    // SAFETY: the builtin on a text datum, as Citus's FindShardInterval calls it.
    unsafe {
        pg_sys::DirectFunctionCall1Coll(
            Some(hashtext_fmgr),
            pg_sys::C_COLLATION_OID,
            scope.into_datum().expect("text is never NULL"),
        )
    }
    .value() as i32
}

/// The tag of Citus's `LockShardDistributionMetadata` (resource_lock.c), an advisory lock in this database:
/// for a table in a co-location group, the lock of the shard at that index in every table of the group
/// (SET_LOCKTAG_COLOCATED_SHARDS_METADATA_RESOURCE, class 8); else the shard's own (class 4).
fn metadata_tag(shard: &Shard) -> pg_sys::LOCKTAG {
    let (field2, field3, class) = match shard.colocation {
        0 => ((shard.id >> 32) as u32, shard.id as u32, 4),
        colocation => (shard.index, colocation, 8),
    };
    pg_sys::LOCKTAG {
        // SAFETY: a plain read of this backend's database.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: field2,
        locktag_field3: field3,
        locktag_field4: class,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Whether this node is the Citus cluster's coordinator (`citus_is_coordinator()`), where a distributed
/// table's own relation holds no rows.
pub fn is_coordinator() -> bool {
    crate::store::with_spi(|client| {
        client
            .select("SELECT pg_catalog.citus_is_coordinator()", None, &[])
            .ok()
            .and_then(|rows| rows.first().get_one::<bool>().ok().flatten())
            .unwrap_or(false)
    })
}
