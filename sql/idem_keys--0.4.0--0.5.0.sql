-- idem_keys 0.4.0 -> 0.5.0: no catalog change. 0.5.0's changes are the library's: tenant binding (the
-- idem_keys.tenant_binding, tenant_setting and tenant_claim settings), idem_lookup inside a parallel query,
-- a sweeper that holds no database between passes, and the function idem_keys_proxy 0.5.0 calls on a
-- router. The version moves with idem_keys_proxy's, which must equal its partitions' (idem_cluster_status).
-- Every change here must leave the catalog equal to a fresh 0.5.0 install (tests/upgrade checks it).
\echo Use "ALTER EXTENSION idem_keys UPDATE TO '0.5.0'" to load this file. \quit
