//! `idem_finish` and `idem_release`: the owner's two ways to end a claim. Both are fenced by the token: only
//! the token the key was last claimed (or recovered) with may end it.

use crate::args::{self, RawJsonb};
use crate::direct;
use crate::error;
use crate::store::{self, Stmt};
use pgrx::datum::Interval;
use pgrx::prelude::*;

/// Store the JSON answer of a claimed key.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(name = "idem_finish", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
fn idem_finish_jsonb(
    scope: Option<&str>,
    key: Option<&str>,
    token: Option<i64>,
    status_code: Option<i32>,
    response: Option<RawJsonb>,
    headers: default!(Option<RawJsonb>, "NULL"),
    retention: default!(Option<Interval>, "NULL"),
) {
    let call = FinishCall::checked(scope, key, token, status_code, headers, retention);
    if let Some(response) = response {
        args::stored_size("response", response.size());
    }
    call.finish(response.map(RawJsonb::datum), None);
}

/// Store the raw (bytea) answer of a claimed key.
// No SET search_path: the hot verbs pin it only around SQL (catalog.rs).
#[pg_extern(name = "idem_finish", volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
fn idem_finish_bytea(
    scope: Option<&str>,
    key: Option<&str>,
    token: Option<i64>,
    status_code: Option<i32>,
    response: Option<&[u8]>,
    headers: default!(Option<RawJsonb>, "NULL"),
    retention: default!(Option<Interval>, "NULL"),
) {
    let call = FinishCall::checked(scope, key, token, status_code, headers, retention);
    if let Some(response) = response {
        args::stored_size("response", response.len());
    }
    let response_bytes = response.and_then(|bytes| bytes.into_datum());
    call.finish(None, response_bytes);
}

/// Give a claim up: the next claim of the key starts afresh. False when the token no longer owns it.
#[pg_extern(volatile, parallel_unsafe, security_definer, requires = ["bootstrap"])]
#[search_path(pg_catalog, @extschema@, pg_temp)]
fn idem_release(scope: Option<&str>, key: Option<&str>, token: Option<i64>) -> bool {
    args::writable("idem_release");
    let (scope, key) = args::scope_and_key("idem_release", scope, key);
    let token = args::require(token, "idem_release", "token");
    // A claim of this transaction not written yet: forgetting it leaves nothing behind.
    if let Some(released) = crate::pending::release(scope, key, token) {
        return released;
    }
    store::with_spi(|client| {
        let params = [store::text(scope), store::text(key), store::int8(token)];
        if store::run(client, Stmt::Release, &params).len() == 1 {
            return true;
        }
        if store::live_owner(client, scope, key).is_none() {
            error::unknown_key("idem_release")
        }
        false
    })
}

/// A finish whose arguments passed every check that needs no table access.
struct FinishCall<'a> {
    scope: &'a str,
    key: &'a str,
    token: i64,
    status_code: i32,
    headers: Option<RawJsonb>,
    retention_micros: i64,
}

impl<'a> FinishCall<'a> {
    fn checked(
        scope: Option<&'a str>,
        key: Option<&'a str>,
        token: Option<i64>,
        status_code: Option<i32>,
        headers: Option<RawJsonb>,
        retention: Option<Interval>,
    ) -> FinishCall<'a> {
        args::writable("idem_finish");
        let (scope, key) = args::scope_and_key("idem_finish", scope, key);
        let token = args::require(token, "idem_finish", "token");
        let status_code = args::status_code("idem_finish", status_code);
        if let Some(headers) = headers {
            let kind = headers.root_kind();
            if kind != "object" {
                error::headers_not_object(kind)
            }
            args::stored_size("headers", headers.size());
        }
        let retention_micros =
            args::duration_micros("retention", retention, crate::guc::retention_micros);
        FinishCall {
            scope,
            key,
            token,
            status_code,
            headers,
            retention_micros,
        }
    }

    fn finish(self, response: Option<pg_sys::Datum>, response_bytes: Option<pg_sys::Datum>) {
        crate::replicated::finish_as_durably_as_replays();
        let now = store::clock_now();
        let answer = direct::Finish {
            token: self.token,
            finished_at: now,
            expires_at: now.saturating_add(self.retention_micros),
            status_code: self.status_code,
            response,
            response_bytes,
            headers: self.headers.map(RawJsonb::datum),
        };
        // A claim of this transaction not written yet: its row is written once, finished.
        match crate::pending::finish(self.scope, self.key, &answer) {
            Some(true) => return,
            Some(false) => error::token_not_owner(self.token),
            None => {}
        }
        if direct::applies() && direct::finish(self.scope, self.key, &answer) == Some(true) {
            return;
        }
        // Here only when the direct path declined, or to tell why the token could not finish the key.
        let params = [
            store::text(self.scope),
            store::text(self.key),
            store::int8(answer.token),
            store::timestamptz(answer.finished_at),
            store::timestamptz(answer.expires_at),
            store::int4(answer.status_code),
            store::raw(answer.response, pg_sys::JSONBOID),
            store::raw(answer.response_bytes, pg_sys::BYTEAOID),
            store::raw(answer.headers, pg_sys::JSONBOID),
        ];
        store::with_spi(|client| {
            if store::run(client, Stmt::Finish, &params).len() == 1 {
                return;
            }
            let check = store::run(client, Stmt::FinishCheck, &params);
            if check.is_empty() || store::value::<bool>(&check, 2).unwrap_or(false) {
                error::unknown_key("idem_finish")
            }
            let owner: i64 = store::value(&check, 1).unwrap_or_default();
            if owner != self.token {
                error::token_not_owner(self.token)
            }
            // Same token, already finished: a retried finish. Fine if it says the same thing.
            if !store::value::<bool>(&check, 3).unwrap_or(false) {
                error::already_finished_differently()
            }
        })
    }
}
