//! The SQL verbs. Each file is one verb (or a pair that share their statements); docs/api.md documents them.

mod checkpoint;
mod claim;
mod fingerprint;
mod finish;
mod lookup;
mod router;
mod sweep;

pub use sweep::Sweep;
