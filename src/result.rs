//! The `idem_result` composite every verb returns.
//!
//! The row type is looked up once per call site (FmgrInfo.fn_extra, the cache PL/pgSQL uses too) from the
//! function's declared result type, so it is right in whatever schema CREATE EXTENSION put it.

use crate::direct::row::{Answer, Checkpoint};
use pgrx::prelude::*;
use pgrx::PgTupleDesc;

pub type IdemResult = pgrx::composite_type!('static, "idem_result");

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    Claimed,
    Replay,
    InProgress,
    Mismatch,
    Recovered,
}

impl Outcome {
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Claimed => "claimed",
            Outcome::Replay => "replay",
            Outcome::InProgress => "in_progress",
            Outcome::Mismatch => "mismatch",
            Outcome::Recovered => "recovered",
        }
    }
}

/// The fields of `idem_result`, in its column order after `outcome`.
pub struct Fields {
    pub outcome: Outcome,
    pub token: Option<i64>,
    pub attempt: Option<i32>,
    pub answer: Answer,
    pub retry_after: Option<i32>,
    pub created_at: Option<i64>,
    pub checkpoint: Checkpoint,
}

impl Fields {
    pub fn new(outcome: Outcome, attempt: i32, created_at: i64) -> Fields {
        Fields {
            outcome,
            token: None,
            attempt: Some(attempt),
            answer: Answer::default(),
            retry_after: None,
            created_at: Some(created_at),
            checkpoint: Checkpoint::default(),
        }
    }

    pub fn into_tuple(self, fcinfo: pg_sys::FunctionCallInfo) -> IdemResult {
        let tupdesc = result_tupdesc(fcinfo);
        let timestamp = |micros: i64| pg_sys::Datum::from(micros);
        let datums = [
            self.outcome.word().into_datum(),
            self.token.into_datum(),
            self.attempt.into_datum(),
            self.answer.status_code.into_datum(),
            self.answer.response,
            self.answer.response_bytes,
            self.answer.headers,
            self.retry_after.into_datum(),
            self.created_at.map(timestamp),
            self.checkpoint.point,
            self.checkpoint.state,
        ];
        // SAFETY: the datums match idem_result's column types one by one (checked by the regress tests).
        unsafe { PgHeapTuple::from_datums(tupdesc, datums) }.expect("idem_result has 11 columns")
    }
}

/// The call's result row descriptor, cached in the call site's fn_extra for the life of the query.
fn result_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> PgTupleDesc<'static> {
    // SAFETY: fcinfo is this call's; fn_extra and fn_mcxt belong to the call site and live as long as it.
    unsafe {
        let flinfo = (*fcinfo).flinfo;
        if (*flinfo).fn_extra.is_null() {
            let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
            let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc);
            if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE {
                pgrx::error!("idem_keys: function must return the composite idem_result");
            }
            let old = pg_sys::MemoryContextSwitchTo((*flinfo).fn_mcxt);
            let kept = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(tupdesc));
            pg_sys::MemoryContextSwitchTo(old);
            (*flinfo).fn_extra = kept.cast();
        }
        PgTupleDesc::from_pg_unchecked((*flinfo).fn_extra.cast())
    }
}
