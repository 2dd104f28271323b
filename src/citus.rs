//! What idem_keys needs to know on a node of a Citus cluster (docs/scale-out.md). There the table is
//! distributed by scope: its rows live in shards, tables named `idem_keys_<shard id>` on the workers, and
//! each node's own `idem_keys` is a shell that Citus's planner routes statements through. Keyed verbs reach
//! the shard by delegation and by statements (`catalog::Names::distributed` turns the direct path off); the
//! sweep, which no scope names, runs on every worker over the shards that worker holds, found here.

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// The shards of the extension's table placed on this node, as schema-qualified quoted names, in shard
/// order. A shard being copied here by a move is not listed until Citus records its placement, so a sweep
/// never deletes from a copy that is still filling.
pub fn local_shards(client: &SpiClient<'_>, table: pg_sys::Oid) -> Vec<String> {
    // The shard's name is Citus's: the table's name, an underscore, the shard id (names this short are
    // never hashed). to_regclass skips a placement whose table is not there (yet).
    const LOCAL_SHARDS: &str = "
        SELECT pg_catalog.format('%I.%I', n.nspname, t.relname || '_' || s.shardid)
          FROM pg_catalog.pg_dist_shard AS s
          JOIN pg_catalog.pg_dist_placement AS p ON p.shardid = s.shardid
          JOIN pg_catalog.pg_class AS t ON t.oid = s.logicalrelid
          JOIN pg_catalog.pg_namespace AS n ON n.oid = t.relnamespace
         WHERE s.logicalrelid = $1
           AND p.groupid = (SELECT g.groupid FROM pg_catalog.pg_dist_local_group AS g)
           AND pg_catalog.to_regclass(pg_catalog.format('%I.%I', n.nspname, t.relname || '_' || s.shardid)) IS NOT NULL
         ORDER BY s.shardid";
    let args = [crate::store::oid(table)];
    let rows = client
        .select(LOCAL_SHARDS, None, &args)
        .unwrap_or_else(|e| pgrx::error!("idem_keys: reading Citus's shard placements: {e}"));
    rows.filter_map(|row| row.get::<String>(1).ok().flatten())
        .collect()
}
