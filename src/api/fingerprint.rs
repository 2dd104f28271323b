//! `idem_fingerprint`: the request fingerprint idem_claim compares, exposed for callers and tests.

use crate::args::RawJsonb;
use crate::fingerprint;
use pgrx::prelude::*;

/// SHA-256 of the canonical form of a jsonb value: equal jsonb values (key order, whitespace, duplicate
/// keys, 1.0 vs 1) give equal fingerprints.
#[pg_extern(name = "idem_fingerprint", immutable, strict, parallel_safe)]
fn idem_fingerprint_jsonb(request: RawJsonb) -> Vec<u8> {
    request.with_text(fingerprint::of_jsonb_text).to_vec()
}

/// SHA-256 of the bytes, equal to PostgreSQL's sha256(bytea).
#[pg_extern(name = "idem_fingerprint", immutable, strict, parallel_safe)]
fn idem_fingerprint_bytea(request: &[u8]) -> Vec<u8> {
    fingerprint::of_bytes(request).to_vec()
}
