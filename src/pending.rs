//! The write-once claim: in a transaction block, a new key's claim writes nothing; the key's row is written
//! once, by `idem_finish` with its answer, or at commit if the transaction commits with the claim still
//! open. A claim and its finish in one transaction (the middlewares' transactional mode) thus cost one
//! insert instead of an insert and an update of the same row, which no other session could ever see.
//!
//! * **Held:** the claim keeps the key lock (src/key_lock.rs) to the end of its transaction, and every
//!   claim of a new key checks that lock, before and after it inserts (direct::claim's `keep`), so a
//!   duplicate answers `in_progress` at once. A claim that cannot keep one more lock (`key_lock::MAX_KEPT`)
//!   writes its row at once instead.
//! * **Durable:** a transaction that commits (or prepares) with such a claim open writes its row first, in
//!   the pre-commit callback: a committed claim is never lost. If that write fails, the commit fails.
//! * **Forgotten:** a claim rolled back, to a savepoint or with its transaction, leaves nothing behind.
//! * **The other verbs** see the key as if it were written: `idem_release` forgets it; `idem_lookup` reads
//!   it from here (`row`); `idem_checkpoint` and a second claim of the key write it first (`write_key`). Only a query of the table
//!   itself, in the claiming transaction, does not see it before its finish or commit.
//!
//! Only the direct path defers (READ COMMITTED, read-write, a table it may write, not distributed by Citus),
//! and `idem_keys.write_once = off` turns it off.

use crate::direct::{self, Claimed, Finish};
use crate::key_lock::{self, Hold};
use crate::key_row::KeyRow;
use crate::store::{self, Stmt};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

/// A claim this transaction made and has not written.
struct Claim {
    scope: String,
    key: String,
    fingerprint: Vec<u8>,
    token: i64,
    created_at: i64,
    lease_ends_at: i64,
    /// The subtransaction that made it: a rollback to before it forgets it.
    subxact: pg_sys::SubTransactionId,
    /// The user the claim ran as: the functions' owner (SECURITY DEFINER), whom the commit's write runs as too,
    /// since the caller may not write the table.
    owner: pg_sys::Oid,
}

impl Claim {
    fn as_claimed(&self) -> Claimed<'_> {
        Claimed {
            scope: &self.scope,
            key: &self.key,
            fingerprint: &self.fingerprint,
            token: self.token,
            created_at: self.created_at,
            lease_ends_at: self.lease_ends_at,
        }
    }
}

thread_local! {
    static PENDING: RefCell<Vec<Claim>> = const { RefCell::new(Vec::new()) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a claim of a new key here may defer its write.
pub fn applies(citus: bool) -> bool {
    // SAFETY: a plain read of the backend's transaction state.
    !citus && crate::guc::write_once() && direct::applies() && unsafe { pg_sys::IsTransactionBlock() }
}

/// What `claim` did.
pub enum Deferred {
    /// The key is this transaction's; its row is written later.
    Claimed(KeyRow),
    /// Another open transaction holds the key's lock.
    Held,
    /// A row of the key appeared since the caller's read: read again.
    Raced,
    /// This transaction keeps as many key locks as it may: write the row now.
    NotDeferred,
}

/// Claims a key that the caller's dirty read found free, without writing it.
pub fn claim(scope: &str, key: &str, fingerprint: &[u8], now: i64, lease_ends_at: i64) -> Deferred {
    let fresh = match key_lock::hold(scope, key) {
        Hold::Taken => return Deferred::Held,
        Hold::Checked => return Deferred::NotDeferred,
        Hold::Kept { fresh } => fresh,
    };
    // With the lock kept, read again: a row inserted before it would have missed it. Any insert after it
    // checks the lock once its row is in, and backs off.
    let free = direct::probe(scope, key, fingerprint)
        .is_some_and(|seen| seen.row.is_none() && seen.writer == direct::Writer::Nobody);
    if !free {
        if fresh {
            key_lock::let_go(scope, key);
        }
        return Deferred::Raced;
    }
    register_callbacks();
    let token = direct::draw_token();
    PENDING.with_borrow_mut(|pending| {
        pending.push(Claim {
            scope: scope.to_owned(),
            key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            token,
            created_at: now,
            lease_ends_at,
            // SAFETY: plain reads of the transaction state and the current user.
            subxact: unsafe { pg_sys::GetCurrentSubTransactionId() },
            owner: unsafe { pg_sys::GetUserId() },
        })
    });
    Deferred::Claimed(KeyRow::claimed(token, now, lease_ends_at))
}

/// The position of the key's unwritten claim, if this transaction has one.
fn position(scope: &str, key: &str) -> Option<usize> {
    PENDING.with_borrow(|pending| {
        pending
            .iter()
            .position(|claim| claim.scope == scope && claim.key == key)
    })
}

/// Finishes the key's unwritten claim by writing its row once, with the answer. `Some(true)`: done.
/// `Some(false)`: the token is not the claim's (the caller raises what a finish of another owner's key
/// raises). `None`: no such claim, or the direct path could not write it (the claim is written as it was
/// claimed, and the caller finishes it the usual way).
pub fn finish(scope: &str, key: &str, answer: &Finish) -> Option<bool> {
    let at = position(scope, key)?;
    if PENDING.with_borrow(|pending| pending[at].token) != answer.token {
        return Some(false);
    }
    let claim = PENDING.with_borrow_mut(|pending| pending.remove(at));
    if direct::applies() && direct::insert_claimed(&claim.as_claimed(), Some(answer)) == Some(true) {
        return Some(true);
    }
    write(&claim);
    None
}

/// Releases the key's unwritten claim: nothing was written, so nothing is left. `None`: no such claim;
/// `Some(false)`: not this token's.
pub fn release(scope: &str, key: &str, token: i64) -> Option<bool> {
    let at = position(scope, key)?;
    PENDING.with_borrow_mut(|pending| {
        if pending[at].token != token {
            return Some(false);
        }
        pending.remove(at);
        Some(true)
    })
}

/// The key's unwritten claim as the row it will be, for `idem_lookup` (which writes nothing).
pub fn row(scope: &str, key: &str) -> Option<KeyRow> {
    let at = position(scope, key)?;
    PENDING.with_borrow(|pending| {
        let claim = &pending[at];
        let mut row = KeyRow::claimed(claim.token, claim.created_at, claim.lease_ends_at);
        row.inserted = false;
        Some(row)
    })
}

/// Writes the key's unwritten claim, if this transaction has one, before a verb that reads or changes the
/// row (`idem_lookup`, `idem_checkpoint`, a second claim of the key).
pub fn write_key(scope: &str, key: &str) {
    if let Some(at) = position(scope, key) {
        let claim = PENDING.with_borrow_mut(|pending| pending.remove(at));
        write(&claim);
    }
}

/// Writes a claim's row as it was claimed.
fn write(claim: &Claim) {
    if direct::applies() && direct::insert_claimed(&claim.as_claimed(), None) == Some(true) {
        return;
    }
    let params = [
        store::text(&claim.scope),
        store::text(&claim.key),
        store::bytes(&claim.fingerprint),
        store::timestamptz(claim.created_at),
        store::timestamptz(claim.lease_ends_at),
        store::int8(claim.token),
    ];
    store::with_spi(|client| {
        if store::run(client, Stmt::InsertClaimed, &params).is_empty() {
            crate::error::claim_lost(&claim.scope, &claim.key)
        }
    })
}

/// Registers the transaction callbacks, once per backend (PostgreSQL keeps them for the backend's life).
fn register_callbacks() {
    if REGISTERED.get() {
        return;
    }
    // SAFETY: registering callbacks with no argument; they only touch this module's thread_local state
    // and, before commit, write through the direct path or SPI.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact), std::ptr::null_mut());
    }
    REGISTERED.set(true);
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        // The transaction commits (or prepares) with claims open: write them, so that they are as durable as
        // a claim written at once. An error here fails the commit.
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PRE_PREPARE => {
            let claims = PENDING.with_borrow_mut(std::mem::take);
            if claims.is_empty() {
                return;
            }
            // SAFETY: still inside the transaction; the statements need a snapshot, as any would, and run as
            // the user who claimed (the functions' owner), as inside idem_claim; an error aborts the
            // transaction, which puts the user back.
            unsafe {
                pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
                let (mut user, mut context) = (pg_sys::InvalidOid, 0);
                pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
                for claim in &claims {
                    pg_sys::SetUserIdAndSecContext(
                        claim.owner,
                        context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32,
                    );
                    write(claim);
                }
                pg_sys::SetUserIdAndSecContext(user, context);
                pg_sys::PopActiveSnapshot();
            }
        }
        XACT_EVENT_COMMIT | XACT_EVENT_ABORT | XACT_EVENT_PREPARE => {
            PENDING.with_borrow_mut(Vec::clear);
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact(
    event: pg_sys::SubXactEvent::Type,
    subxact: pg_sys::SubTransactionId,
    parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    match event {
        // Rolled back to a savepoint before the claim (its key lock went with it).
        SUBXACT_EVENT_ABORT_SUB => {
            PENDING.with_borrow_mut(|pending| pending.retain(|claim| claim.subxact != subxact))
        }
        // Released: the claims now belong to the enclosing (sub)transaction.
        SUBXACT_EVENT_COMMIT_SUB => PENDING.with_borrow_mut(|pending| {
            for claim in pending.iter_mut().filter(|claim| claim.subxact == subxact) {
                claim.subxact = parent;
            }
        }),
        _ => {}
    }
}
