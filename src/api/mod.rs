//! The SQL verbs. Each file is one verb (or a pair that share their statements); see docs/api.md.

mod checkpoint;
mod claim;
mod fingerprint;
mod finish;
mod lookup;
mod sweep;

pub use sweep::Sweep;
