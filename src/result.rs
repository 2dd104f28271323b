//! The `idem_result` composite every verb returns.
//!
//! The row type is the calling expression's result type, read from the type cache, so it is right in
//! whatever schema CREATE EXTENSION put it.

use crate::key_row::{Answer, Checkpoint};
use pgrx::prelude::*;

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

    /// An outcome about a row this call cannot see (another transaction's uncommitted claim).
    pub fn unknown(outcome: Outcome) -> Fields {
        Fields {
            outcome,
            token: None,
            attempt: None,
            answer: Answer::default(),
            retry_after: None,
            created_at: None,
            checkpoint: Checkpoint::default(),
        }
    }

    pub fn into_tuple(self, fcinfo: pg_sys::FunctionCallInfo) -> IdemResult {
        let timestamp = |micros: i64| pg_sys::Datum::from(micros);
        let fields = [
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
        let mut datums = fields.map(|field| field.unwrap_or(pg_sys::Datum::from(0)));
        let mut nulls = fields.map(|field| field.is_none());
        // SAFETY: the datums match idem_result's column types one by one (checked by the regress tests), and
        // the descriptor has their number of columns (checked here). heap_form_tuple writes the composite
        // datum's header (length, type, typmod); HeapTupleHeaderGetDatum returns it as is, or a copy with any
        // TOASTed field fetched inline (a composite datum may not point into TOAST). Both allocate in the
        // call's memory context, which the caller reads the result from.
        unsafe {
            let tupdesc = result_tupdesc(fcinfo);
            if (*tupdesc).natts as usize != datums.len() {
                pgrx::error!(
                    "idem_keys: idem_result has {} columns, this library writes {}",
                    (*tupdesc).natts,
                    datums.len()
                );
            }
            let tuple = pg_sys::heap_form_tuple(tupdesc, datums.as_mut_ptr(), nulls.as_mut_ptr());
            IdemResult(pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data))
        }
    }
}

/// An `idem_result` row: the composite datum a verb returns, formed once. (pgrx's PgHeapTuple formed the
/// tuple, then copied it into a datum, with a pinned descriptor and two vectors on the way: 2,800
/// instructions of a 73,000-instruction replay, bench/callgrind_replay.sh.)
pub struct IdemResult(pg_sys::Datum);

pgrx::impl_sql_translatable!(IdemResult, "idem_result");

// SAFETY: the datum is a composite datum of the call's result type, allocated in the call's memory context.
unsafe impl pgrx::callconv::BoxRet for IdemResult {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        // SAFETY: the caller returns this Datum from the function (BoxRet's contract).
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

/// The call's result row descriptor: the type cache's, by the calling expression's result type. fn_extra
/// would keep it for one execution only (the executor builds each execution's call site anew, so a prepared
/// statement's every call paid a catalog lookup and two descriptor copies); the type cache keeps it for the
/// backend, and follows ALTER TYPE. It is not pinned: the caller forms the tuple at once, with no catalog
/// access in between (only that could process an invalidation and free a replaced descriptor). A call
/// without an expression (fmgr from C code) asks the catalog, for a blessed copy in the call's context.
fn result_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::TupleDesc {
    // SAFETY: fcinfo is this call's; lookup_type_cache errors out for a type that is not there.
    unsafe {
        let rettype = pg_sys::get_fn_expr_rettype((*fcinfo).flinfo);
        if rettype != pg_sys::InvalidOid && rettype != pg_sys::RECORDOID {
            let entry = pg_sys::lookup_type_cache(rettype, pg_sys::TYPECACHE_TUPDESC as i32);
            if !(*entry).tupDesc.is_null() {
                return (*entry).tupDesc;
            }
        }
        let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
        let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc);
        if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE {
            pgrx::error!("idem_keys: function must return the composite idem_result");
        }
        pg_sys::BlessTupleDesc(tupdesc)
    }
}
