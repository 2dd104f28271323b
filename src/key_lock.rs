//! The key lock: how a claim tells "another transaction holds this key, uncommitted" without waiting on it.
//!
//! A claim inserts its row in the caller's transaction. Until that transaction commits, no other backend can
//! see the row, and a second claim's insert would wait on it (the unique check waits for the inserting
//! transaction), for as long as the first transaction stays open: in the same-transaction mode that is the
//! whole handler. So every claim that is about to write first takes the key's lock without waiting; a claim
//! that cannot have it knows an open transaction holds the key and answers `in_progress` (or polls, within its
//! `wait`) instead of blocking.
//!
//! The lock is exactly `pg_try_advisory_xact_lock(hashtextextended(octet_length(scope) || ':' || scope || key,
//! SEED))`, which the portable edition calls by name, so the two editions agree and `pg_locks` shows it as an
//! advisory lock (`objsubid = 1`). Inside a transaction block it is held to the end of the transaction (with
//! the row it guards). Outside one, the statement's own commit ends the claim a moment later, so the lock is
//! let go at once: a statement claiming thousands of keys holds none of them.

use pgrx::pg_sys;
use pgrx::IntoDatum;

/// `hashtextextended`'s seed for key locks: any fixed value; this one spells "idem".
pub const SEED: u64 = 0x6964_656d;

/// Takes the key's lock if no other transaction holds it. False: a transaction that is still open claimed,
/// took over or is about to claim this key.
pub fn try_take(scope: &str, key: &str) -> bool {
    let tag = tag_of(scope, key);
    // SAFETY: a lock request on a tag built as SET_LOCKTAG_INT64 builds it, in a transaction; the lock manager
    // releases it at the transaction's end (or at the LockRelease below).
    unsafe {
        let taken =
            pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, true);
        if taken == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            return false;
        }
        if !pg_sys::IsTransactionBlock() {
            pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false);
        }
    }
    true
}

unsafe extern "C-unwind" {
    // The builtin itself, for fmgr (pg_sys's binding is a guarded Rust function, not a PGFunction).
    fn hashtextextended(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// The advisory tag `pg_try_advisory_xact_lock(bigint)` uses for the key's hash, in this database.
fn tag_of(scope: &str, key: &str) -> pg_sys::LOCKTAG {
    let text = format!("{}:{scope}{key}", scope.len());
    // SAFETY: the builtin hashtextextended on a text datum and an int8 seed, under the default (deterministic)
    // collation, as the portable edition's call runs it.
    let hash = unsafe {
        pg_sys::DirectFunctionCall2Coll(
            Some(hashtextextended),
            pg_sys::DEFAULT_COLLATION_OID,
            text.as_str().into_datum().expect("text is never NULL"),
            pg_sys::Datum::from(SEED as i64),
        )
    }
    .value() as u64;
    pg_sys::LOCKTAG {
        // SAFETY: a plain read of this backend's database.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: (hash >> 32) as u32,
        locktag_field3: hash as u32,
        locktag_field4: 1,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}
