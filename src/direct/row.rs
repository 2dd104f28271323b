//! A key's row as the direct path reads and writes it: the column layout of `idem_keys` (sql/bootstrap.sql)
//! and the tuple builder. The SPI statements (store.rs) name the same columns in SQL; `shape::check_table`
//! checks the catalog against `COLUMNS` before any row is written from here. What both paths hand to the
//! verbs is `crate::key_row`.

use crate::key_row::{Answer, Checkpoint, KeyRow};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Column numbers (1-based, as in the catalog) of `idem_keys`, in the order sql/bootstrap.sql creates them.
pub mod col {
    pub const SCOPE: usize = 1;
    pub const KEY: usize = 2;
    pub const FINGERPRINT: usize = 3;
    pub const TOKEN: usize = 4;
    pub const ATTEMPT: usize = 5;
    pub const CREATED_AT: usize = 6;
    pub const CLAIMED_AT: usize = 7;
    pub const LEASE_ENDS_AT: usize = 8;
    pub const FINISHED_AT: usize = 9;
    pub const EXPIRES_AT: usize = 10;
    pub const STATUS_CODE: usize = 11;
    pub const RESPONSE: usize = 12;
    pub const RESPONSE_BYTES: usize = 13;
    pub const HEADERS: usize = 14;
    pub const CHECKPOINT: usize = 15;
    pub const CHECKPOINT_STATE: usize = 16;
    pub const COUNT: usize = 16;
}

/// Each column's type and whether it is NOT NULL, in column order.
pub const COLUMNS: [(pg_sys::Oid, bool); col::COUNT] = [
    (pg_sys::TEXTOID, true),
    (pg_sys::TEXTOID, true),
    (pg_sys::BYTEAOID, true),
    (pg_sys::INT8OID, true),
    (pg_sys::INT4OID, true),
    (pg_sys::TIMESTAMPTZOID, true),
    (pg_sys::TIMESTAMPTZOID, true),
    (pg_sys::TIMESTAMPTZOID, true),
    (pg_sys::TIMESTAMPTZOID, false),
    (pg_sys::TIMESTAMPTZOID, false),
    (pg_sys::INT4OID, false),
    (pg_sys::JSONBOID, false),
    (pg_sys::BYTEAOID, false),
    (pg_sys::JSONBOID, false),
    (pg_sys::TEXTOID, false),
    (pg_sys::JSONBOID, false),
];

/// The columns a finish writes: the range table says so, so that the primary key's new entry carries the
/// "unchanged" hint that lets btree clean up old versions bottom-up, and the other indexes' entries do not.
pub const FINISH_COLUMNS: [usize; 6] = [
    col::FINISHED_AT,
    col::EXPIRES_AT,
    col::STATUS_CODE,
    col::RESPONSE,
    col::RESPONSE_BYTES,
    col::HEADERS,
];

/// A tuple's values under construction, indexed by 1-based column number.
pub struct Row {
    values: [pg_sys::Datum; col::COUNT],
    nulls: [bool; col::COUNT],
}

impl Row {
    pub fn nulls() -> Row {
        Row {
            values: [pg_sys::Datum::from(0); col::COUNT],
            nulls: [true; col::COUNT],
        }
    }

    /// The first claim's row: the owner's fields set, no answer. The token is set by the caller, and only
    /// when it inserts: a replay costs no token.
    pub fn claim(scope: &str, key: &str, fingerprint: &[u8], now: i64, lease_ends_at: i64) -> Row {
        let mut row = Row::nulls();
        row.set(col::SCOPE, text(scope));
        row.set(col::KEY, text(key));
        row.set(col::FINGERPRINT, fingerprint.into_datum().unwrap());
        row.set(col::TOKEN, 0i64.into());
        row.set(col::ATTEMPT, 1i32.into());
        row.set(col::CREATED_AT, now.into());
        row.set(col::CLAIMED_AT, now.into());
        row.set(col::LEASE_ENDS_AT, lease_ends_at.into());
        row
    }

    /// The slot's values; by-reference ones still point into its buffer.
    ///
    /// # Safety
    /// `slot` holds a tuple of `idem_keys` (checked by `shape::check_table`), and stays as it is while the row
    /// is used.
    pub unsafe fn from_slot(slot: *mut pg_sys::TupleTableSlot) -> Row {
        unsafe {
            pg_sys::slot_getallattrs(slot);
            let mut row = Row::nulls();
            row.values
                .copy_from_slice(std::slice::from_raw_parts((*slot).tts_values, col::COUNT));
            row.nulls
                .copy_from_slice(std::slice::from_raw_parts((*slot).tts_isnull, col::COUNT));
            row
        }
    }

    pub fn set(&mut self, column: usize, value: pg_sys::Datum) {
        self.values[column - 1] = value;
        self.nulls[column - 1] = false;
    }

    pub fn set_opt(&mut self, column: usize, value: Option<pg_sys::Datum>) {
        match value {
            Some(value) => self.set(column, value),
            None => self.nulls[column - 1] = true,
        }
    }

    pub fn is_null(&self, column: usize) -> bool {
        self.nulls[column - 1]
    }

    /// A by-value column.
    pub fn get<T: FromDatum>(&self, column: usize) -> Option<T> {
        // SAFETY: the caller names the column's type; by-value types need no memory context.
        unsafe { T::from_datum(self.values[column - 1], self.nulls[column - 1]) }
    }

    /// A varlena column, detoasted into the current memory context.
    ///
    /// # Safety
    /// `column` is a varlena column, and the tuple the row was read from is still held by its slot.
    pub unsafe fn copied(&self, column: usize) -> Option<pg_sys::Datum> {
        if self.is_null(column) {
            return None;
        }
        unsafe {
            Some(pg_sys::Datum::from(pg_sys::pg_detoast_datum_copy(
                self.values[column - 1].cast_mut_ptr(),
            )))
        }
    }

    /// Puts the values into a virtual slot.
    ///
    /// # Safety
    /// `slot` is a virtual slot of `idem_keys`' tuple descriptor.
    pub unsafe fn store(&self, slot: *mut pg_sys::TupleTableSlot) {
        unsafe {
            pg_sys::ExecClearTuple(slot);
            std::slice::from_raw_parts_mut((*slot).tts_values, col::COUNT)
                .copy_from_slice(&self.values);
            std::slice::from_raw_parts_mut((*slot).tts_isnull, col::COUNT)
                .copy_from_slice(&self.nulls);
            pg_sys::ExecStoreVirtualTuple(slot);
        }
    }

    /// The stored row, classified for `idem_claim`'s decision as the SPI statement's columns are
    /// (store::first_key_row). Varlenas are copied into the current memory context.
    ///
    /// # Safety
    /// As for `copied`: the row's tuple is still held by its slot.
    pub unsafe fn key_row(&self, fingerprint: &[u8]) -> KeyRow {
        unsafe {
            let finished = !self.is_null(col::FINISHED_AT);
            let stored_fingerprint = <&[u8]>::from_datum(
                self.values[col::FINGERPRINT - 1],
                self.is_null(col::FINGERPRINT),
            );
            KeyRow {
                inserted: false,
                token: self.get(col::TOKEN).unwrap_or_default(),
                attempt: self.get(col::ATTEMPT).unwrap_or_default(),
                same_request: stored_fingerprint == Some(fingerprint),
                finished,
                lease_ends_at: self.get(col::LEASE_ENDS_AT),
                expires_at: self.get(col::EXPIRES_AT),
                answer: Answer {
                    status_code: self.get(col::STATUS_CODE),
                    response: self.copied(col::RESPONSE),
                    response_bytes: self.copied(col::RESPONSE_BYTES),
                    headers: self.copied(col::HEADERS),
                },
                created_at: self.get(col::CREATED_AT).unwrap_or_default(),
                // A finished key's retained checkpoint is shown by no outcome (as in the SPI statements).
                checkpoint: if finished {
                    Checkpoint::default()
                } else {
                    Checkpoint {
                        point: self.copied(col::CHECKPOINT),
                        state: self.copied(col::CHECKPOINT_STATE),
                    }
                },
            }
        }
    }
}

pub fn text(value: &str) -> pg_sys::Datum {
    value.into_datum().expect("text is never NULL")
}
