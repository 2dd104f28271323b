//! The optional sweeper: background workers that remove expired keys (`worker`: a launcher and one sweeper
//! per database in `idem_keys.sweep_databases`). It needs `shared_preload_libraries = 'idem_keys'`; without
//! it pg_cron's `CALL idem_sweep_paced()` does the same work (docs/api.md). What every sweep did, the
//! worker's or a caller's, is in `crate::sweep_stats`, which `api::sweep` and the worker both write.

pub mod worker;
