-- idem_keys 0.5.0 -> 0.6.0: no catalog change. 0.6.0's change is the library's: a claim about to write takes
-- the key's lock without waiting (an advisory lock of the key's hash), so a claim never waits on another
-- transaction's uncommitted claim of the same key beyond its wait: it answers in_progress, or polls within
-- its wait, instead of blocking until that transaction ends. The version moves with idem_keys_proxy's, which
-- must equal its partitions' (idem_cluster_status).
-- Every change here must leave the catalog equal to a fresh 0.6.0 install (tests/upgrade checks it).
\echo Use "ALTER EXTENSION idem_keys UPDATE TO '0.6.0'" to load this file. \quit
