-- idem_keys_proxy 0.5.0 -> 0.6.0: no change on the router. The version follows idem_keys 0.6.0's, whose
-- partitions the router checks against its own (idem_cluster_status); 0.6.0's change is in idem_keys' library
-- on the partitions (a claim never waits on another transaction's uncommitted claim beyond its wait).

\echo Use "ALTER EXTENSION idem_keys_proxy UPDATE" to load this file. \quit
