//! The key lock: the mark an open transaction leaves on a key it is taking over, where a dirty read of the
//! key's row alone cannot say "held" (src/direct/dirty.rs says what it can), and on every key it writes when
//! no dirty read is possible (the direct path switched off or declined, a shard on another node).
//!
//! A claim's fresh insert needs no lock: its uncommitted row is what a duplicate's dirty read finds. A
//! takeover updates a row that is already committed, which a dirty read shows as "being changed" exactly as
//! it shows a finish or a release that is committing right now; those a duplicate should wait for (a few
//! milliseconds, then the answer), a takeover it must not (the taker may hold the key for a whole handler).
//! The key lock tells the two apart.
//!
//! The lock is on a tag no SQL function can name (`locktag_field4 = PRIVATE_SPACE`; `pg_advisory_lock` and its
//! kin only make 1 and 2), so no role can take it to pin a key, whoever's it is. `pg_locks` shows it as an
//! advisory lock with `objsubid = 26980`.
//!
//! It is kept to the end of the transaction, however the transaction began (a block, a function called in
//! autocommit, a multi-statement query, a pipeline), for at most `MAX_KEPT` keys per transaction, so holding
//! keys never exhausts the lock table: past that, a write only checks that no other transaction holds the
//! lock, and a duplicate of such a key waits for the writer's transaction to end instead of answering
//! `in_progress` at once (docs/failure-model.md).

use pgrx::pg_sys;
use pgrx::IntoDatum;
use std::cell::Cell;

/// `hashtextextended`'s seed for key locks: any fixed value; this one spells "idem".
const SEED: u64 = 0x6964_656d;

/// The advisory tag space the key locks live in: "id"; any value but 1 and 2, which SQL's advisory lock
/// functions use.
const PRIVATE_SPACE: u16 = 0x6964;

/// How many key locks one transaction keeps. PostgreSQL's lock table holds `max_locks_per_transaction` (64 by
/// default) times the number of connections, shared by all: half a backend's share.
pub const MAX_KEPT: u32 = 32;

thread_local! {
    /// (the local transaction id that kept them, how many key locks it keeps).
    static KEPT: Cell<(pg_sys::LocalTransactionId, u32)> = const { Cell::new((0, 0)) };
}

/// What `hold` did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Hold {
    /// The lock is this transaction's until it ends; `fresh`: taken just now (`let_go` may give it back).
    Kept { fresh: bool },
    /// Free, but not kept: this transaction keeps `MAX_KEPT` already.
    Checked,
    /// Another open transaction holds it.
    Taken,
}

impl Hold {
    /// Whether this transaction may write the key: nobody else holds its lock.
    pub fn free(self) -> bool {
        self != Hold::Taken
    }
}

/// Takes the key's lock and keeps it to the end of the transaction (within `MAX_KEPT`; past it, only checks
/// that it is free).
pub fn hold(scope: &str, key: &str) -> Hold {
    let tag = tag_of(scope, key);
    // SAFETY: our own PGPROC's lxid, read by its own backend.
    let lxid = unsafe { (*pg_sys::MyProc).fpLocalTransactionId };
    let (kept_by, kept) = KEPT.get();
    let kept = if kept_by == lxid { kept } else { 0 };
    // SAFETY: a lock request on a tag built as SET_LOCKTAG_ADVISORY builds it, in a transaction; the lock
    // manager releases it at the transaction's end (or at the LockRelease below).
    unsafe {
        let taken =
            pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, true);
        if taken == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            return Hold::Taken;
        }
        if taken != pg_sys::LockAcquireResult::LOCKACQUIRE_OK {
            // Already ours: keep the one count.
            pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false);
            return Hold::Kept { fresh: false };
        }
        if kept >= MAX_KEPT {
            pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false);
            return Hold::Checked;
        }
        KEPT.set((lxid, kept + 1));
    }
    Hold::Kept { fresh: true }
}

/// Gives back a lock `hold` just took (`Kept { fresh: true }`), when the key turned out to be taken.
pub fn let_go(scope: &str, key: &str) {
    let tag = tag_of(scope, key);
    // SAFETY: the lock is held by this transaction, once (fresh).
    unsafe {
        pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false);
    }
    KEPT.set((KEPT.get().0, KEPT.get().1.saturating_sub(1)));
}

/// Whether another open transaction holds the key's lock (is taking the key over), without keeping it.
pub fn held_elsewhere(scope: &str, key: &str) -> bool {
    let tag = tag_of(scope, key);
    // SAFETY: as in `hold`; a lock we take here is let go at once (a lock we already held keeps its count).
    unsafe {
        let taken =
            pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, true);
        if taken == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            return true;
        }
        pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false);
    }
    false
}

unsafe extern "C-unwind" {
    // The builtin itself, for fmgr (pg_sys's binding is a guarded Rust function, not a PGFunction).
    fn hashtextextended(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum;
}

/// The key lock's tag, in this database: the key's 64-bit hash in the private advisory space.
fn tag_of(scope: &str, key: &str) -> pg_sys::LOCKTAG {
    let text = format!("{}:{scope}{key}", scope.len());
    // SAFETY: the builtin hashtextextended on a text datum and an int8 seed, under the default (deterministic)
    // collation.
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
        locktag_field4: PRIVATE_SPACE,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}
