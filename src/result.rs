//! The `idem_result` composite every verb returns.
//!
//! The row type is the calling expression's result type, read from the type cache, so it is right in
//! whatever schema CREATE EXTENSION put it.

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

/// The call's result row descriptor: the type cache's, by the calling expression's result type. fn_extra
/// would keep it for one execution only (the executor builds each execution's call site anew, so a prepared
/// statement's every call paid a catalog lookup and two descriptor copies); the type cache keeps it for the
/// backend, and follows ALTER TYPE. A call without an expression (fmgr from C code) asks the catalog.
fn result_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> PgTupleDesc<'static> {
    // SAFETY: fcinfo is this call's. The type cache's descriptor is reference-counted: PgTupleDesc::from_pg
    // releases it when the PgHeapTuple holding it drops, after the result datum is copied out of the tuple;
    // the catalog's is a copy in the call's memory context.
    unsafe {
        let rettype = pg_sys::get_fn_expr_rettype((*fcinfo).flinfo);
        if rettype != pg_sys::InvalidOid && rettype != pg_sys::RECORDOID {
            return PgTupleDesc::from_pg(pg_sys::lookup_rowtype_tupdesc(rettype, -1));
        }
        let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
        let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc);
        if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE {
            pgrx::error!("idem_keys: function must return the composite idem_result");
        }
        PgTupleDesc::from_pg_is_copy(pg_sys::BlessTupleDesc(tupdesc))
    }
}
