//! A dirty read of a key (PostgreSQL's `SnapshotDirty`, which is how its own unique checks and speculative
//! insertion find their conflicts): the committed row, and whether another transaction that is still open is
//! writing the key, learnt without waiting for that transaction and without taking any lock.
//!
//! A version another open transaction inserted (a claim's row, or the new version of its update) shows its
//! inserter; a committed version that an open transaction is updating or deleting shows that transaction.
//! Only rows are read, so the answer holds in any kind of transaction (a block, a function called in
//! autocommit, a pipeline), for any number of keys, on whichever node holds the row, and no role can pin a
//! key with it. What it cannot say is why a committed row is being changed: src/key_lock.rs tells a takeover
//! from a finish or a release.

use super::by_key::{scan_by_key, Fetched};
use super::reader::Reader;
use super::row::Row;
use crate::key_row::KeyRow;
use pgrx::pg_sys;
use std::ptr;

/// Who, besides this transaction, is writing the key.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Writer {
    /// Nobody: the row (or its absence) is final until someone writes.
    Nobody,
    /// An open transaction inserted the key's row (a claim, or a takeover's new version) and no committed row
    /// holds the key.
    Inserting,
    /// This open transaction is updating or deleting the committed row (a finish, release, checkpoint, sweep
    /// or takeover).
    Changing(pg_sys::TransactionId),
}

/// The key as a dirty read saw it.
pub struct Seen {
    /// The committed version (or this transaction's own), as a claim classifies it.
    pub row: Option<KeyRow>,
    pub writer: Writer,
}

/// Reads every version of the key that a dirty snapshot sees. `None`: too many rows of other keys share the
/// key's hash (the caller reads another way).
///
/// # Safety
/// `reader` is open, in a transaction.
pub(super) unsafe fn read(
    reader: &Reader,
    scope: &str,
    key: &str,
    fingerprint: &[u8],
) -> Option<Seen> {
    unsafe {
        // InitDirtySnapshot: the visibility check fills in xmin/xmax for each version it looks at.
        let mut dirty: pg_sys::SnapshotData = std::mem::zeroed();
        dirty.snapshot_type = pg_sys::SnapshotType::SNAPSHOT_DIRTY;
        let slot = pg_sys::table_slot_create(reader.rel, ptr::null_mut());
        let mut seen = Seen {
            row: None,
            writer: Writer::Nobody,
        };
        let mut inserting = false;
        let snapshot: *mut pg_sys::SnapshotData = &mut dirty;
        let fetched = scan_by_key(reader.rel, reader.read_by, scope, key, snapshot, slot, || {
            let (xmin, xmax) = ((*snapshot).xmin, (*snapshot).xmax);
            if xmin != pg_sys::InvalidTransactionId {
                // Inserted by an open transaction: a claim's row or an update's new version, not ours to read.
                inserting = true;
            } else {
                seen.row = Some(Row::from_slot(slot).key_row(fingerprint));
                if xmax != pg_sys::InvalidTransactionId {
                    seen.writer = Writer::Changing(xmax);
                }
            }
            true
        });
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        if fetched == Fetched::Crowded {
            return None;
        }
        if inserting && seen.row.is_none() {
            seen.writer = Writer::Inserting;
        }
        Some(seen)
    }
}
