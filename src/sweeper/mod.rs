//! The optional sweeper: background workers that remove expired keys (`worker`: a launcher and one sweeper
//! per database in `idem_keys.sweep_databases`), and the statistics every sweep publishes in shared memory
//! for `idem_stats()` (`stats`). Both need `shared_preload_libraries = 'idem_keys'`; without it pg_cron's
//! `CALL idem_sweep_paced()` does the same work (docs/api.md).

pub mod stats;
pub mod worker;
