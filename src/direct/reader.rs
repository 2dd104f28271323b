//! The read side of the direct path: the table and one index, opened for a replay's or a lookup's read by
//! key, without the executor state a write needs.

#[cfg(any(test, feature = "pg_test"))]
use super::by_key::ReadIndex;
use super::by_key::{fetch_by_key, Fetched, KeyIndex};
use super::shape::{check_table, open_relation, remember, verified_in, verify_indexes, Decline};
use crate::catalog;
use pgrx::pg_sys;

/// The table and the one index a read by key goes through (`ReadIndex`), opened for one read: what a replay
/// and a lookup need, without the executor state and the other indexes a write opens. It opens only a
/// table whose shape a full `Table::open` verified since the relcache last reported a change to it;
/// otherwise it runs the same checks itself first, with its own lock mode (a lookup on a hot standby may
/// take no write lock).
pub struct Reader {
    pub rel: pg_sys::Relation,
    pub(super) read_by: KeyIndex,
}

impl Reader {
    /// # Safety
    /// Inside a transaction, in a function call; the result must be closed (or the transaction aborted).
    pub unsafe fn open(scope: &str, lock: pg_sys::LOCKMODE) -> Result<Reader, Decline> {
        unsafe {
            let (rel, _, generation) = open_relation(scope, lock)?;
            let verified = match verified_in(generation, (*rel).rd_id) {
                Some(found) => Ok(found),
                None => check_table(rel).and_then(|()| verify_indexes(rel, lock)),
            };
            let read_by = match verified {
                Ok((oid, kind)) => KeyIndex {
                    index: pg_sys::index_open(oid, lock),
                    kind,
                },
                Err(why) => {
                    pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                    return Err(why);
                }
            };
            let reader = Reader { rel, read_by };
            // Locking the index may have processed more (a unique index being built concurrently): then
            // leave this call to the full path, which checks again.
            if catalog::generation() != generation {
                reader.close();
                return Err(Decline::NotFound);
            }
            remember(generation, read_by);
            Ok(reader)
        }
    }

    /// The version of the key's row `snapshot` sees, into `slot` (a slot of this table).
    ///
    /// # Safety
    /// The reader is open; `snapshot` is registered or active for the duration of the call.
    pub unsafe fn fetch(
        &self,
        scope: &str,
        key: &str,
        snapshot: pg_sys::Snapshot,
        slot: *mut pg_sys::TupleTableSlot,
    ) -> Fetched {
        unsafe { fetch_by_key(self.rel, self.read_by, scope, key, snapshot, slot) }
    }

    /// Which index the reader reads through. For the tests.
    #[cfg(any(test, feature = "pg_test"))]
    pub fn kind(&self) -> ReadIndex {
        self.read_by.kind
    }

    /// Closes the index and the table; their locks are kept until the transaction ends.
    ///
    /// # Safety
    /// Called once, with the reader open.
    pub unsafe fn close(self) {
        unsafe {
            pg_sys::index_close(self.read_by.index, pg_sys::NoLock as pg_sys::LOCKMODE);
            pg_sys::table_close(self.rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
    }
}

/// Which index a reader (a replay's first read, a lookup) would read the table through as it stands now, or
/// why it would not read it.
/// For the tests.
#[cfg(any(test, feature = "pg_test"))]
pub fn check_read() -> Result<ReadIndex, Decline> {
    // SAFETY: opened and closed inside the calling transaction.
    unsafe {
        Reader::open("", pg_sys::AccessShareLock as pg_sys::LOCKMODE).map(|reader| {
            let kind = reader.kind();
            reader.close();
            kind
        })
    }
}
