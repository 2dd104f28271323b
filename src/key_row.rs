//! A stored key as the verbs see it (`KeyRow`, with its `Answer` and `Checkpoint`): what the SPI statements
//! (store.rs) and the direct path (direct/) both read a row into, and what `idem_claim`'s decision and the
//! idem_result row (result.rs) are made from.

use pgrx::pg_sys;

/// A key's row as a claim sees it. Varlena values are copied into the caller's memory context, so they
/// outlive SPI_finish (or the direct path's executor state) and go straight into the result tuple.
pub struct KeyRow {
    pub inserted: bool,
    pub token: i64,
    pub attempt: i32,
    pub same_request: bool,
    pub finished: bool,
    pub lease_ends_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub answer: Answer,
    pub created_at: i64,
    pub checkpoint: Checkpoint,
}

/// The last recovery point an owner recorded, as raw datums owned by the caller's memory context.
#[derive(Default)]
pub struct Checkpoint {
    pub point: Option<pg_sys::Datum>,
    pub state: Option<pg_sys::Datum>,
}

/// A stored answer, as raw datums owned by the caller's memory context.
#[derive(Default)]
pub struct Answer {
    pub status_code: Option<i32>,
    pub response: Option<pg_sys::Datum>,
    pub response_bytes: Option<pg_sys::Datum>,
    pub headers: Option<pg_sys::Datum>,
}

impl KeyRow {
    /// The row as the claim that just inserted it knows it.
    pub fn claimed(token: i64, now: i64, lease_ends_at: i64) -> KeyRow {
        KeyRow {
            inserted: true,
            token,
            attempt: 1,
            same_request: true,
            finished: false,
            lease_ends_at: Some(lease_ends_at),
            expires_at: None,
            answer: Answer::default(),
            created_at: now,
            checkpoint: Checkpoint::default(),
        }
    }
}
