//! Argument checks shared by the verbs, and the zero-copy jsonb argument type.
//!
//! Every check runs before the first write, so a bad call changes nothing.

use crate::error;
use pgrx::datum::Interval;
use pgrx::{pg_sys, FromDatum};

/// Scope and key are capped so a hostile caller cannot make the primary key index hold megabyte entries.
pub const MAX_NAME_CHARS: usize = 255;

/// Writes need the primary. On a hot standby say so, with SQLSTATE 25006, before PostgreSQL's generic
/// "cannot execute INSERT in a read-only transaction" would.
pub fn writable(function: &str) {
    // SAFETY: a read of shared recovery state; cheap once recovery has ended (cached per backend).
    if unsafe { pg_sys::RecoveryInProgress() } {
        error::read_only_standby(function)
    }
}

pub fn require<T>(value: Option<T>, function: &str, argument: &str) -> T {
    value.unwrap_or_else(|| error::null_argument(function, argument))
}

/// Scope may be empty (one-tenant apps); key may not. With tenant binding on, the scope must also be the
/// caller's tenant's (42501), checked last so that a malformed call is told so whoever makes it.
pub fn scope_and_key<'a>(
    function: &str,
    scope: Option<&'a str>,
    key: Option<&'a str>,
) -> (&'a str, &'a str) {
    let scope = require(scope, function, "scope");
    let key = require(key, function, "key");
    if let Some(chars) = chars_over_limit(scope) {
        error::bad_scope(chars, MAX_NAME_CHARS)
    }
    let key = nonempty_name(key, error::bad_key);
    crate::tenant::check(function, scope);
    (scope, key)
}

/// A key or a checkpoint name: 1 to 255 characters, else `bad` with the length found and the limit.
fn nonempty_name(name: &str, bad: fn(usize, usize) -> !) -> &str {
    if name.is_empty() {
        bad(0, MAX_NAME_CHARS)
    }
    if let Some(chars) = chars_over_limit(name) {
        bad(chars, MAX_NAME_CHARS)
    }
    name
}

/// Characters, not bytes: the limit is what a user reads. A string of at most 255 bytes cannot have more
/// characters than that, so the hot path never counts.
fn chars_over_limit(text: &str) -> Option<usize> {
    if text.len() <= MAX_NAME_CHARS {
        return None;
    }
    let chars = text.chars().count();
    (chars > MAX_NAME_CHARS).then_some(chars)
}

/// A recovery point's name: like a key, 1 to 255 characters.
pub fn checkpoint_name(point: Option<&str>) -> &str {
    nonempty_name(
        require(point, "idem_checkpoint", "point"),
        error::bad_checkpoint,
    )
}

pub fn status_code(function: &str, status_code: Option<i32>) -> i32 {
    let status_code = require(status_code, function, "status_code");
    if !(100..=599).contains(&status_code) {
        error::bad_status_code(status_code)
    }
    status_code
}

/// A positive duration in microseconds, or the setting's default when NULL. Months count as 30 days, as in
/// `EXTRACT(epoch FROM interval)`.
pub fn duration_micros(
    argument: &str,
    value: Option<Interval>,
    default_micros: impl FnOnce() -> i64,
) -> i64 {
    match value {
        None => default_micros(),
        Some(interval) => {
            let micros = interval.as_micros();
            if micros <= 0 {
                error::not_positive(argument)
            }
            micros.min(i64::MAX as i128 / 4) as i64
        }
    }
}

/// How long a claim may wait for a busy key: NULL or zero means not at all.
pub fn wait_micros(value: Option<Interval>) -> i64 {
    let micros = value.map_or(0, |interval| interval.as_micros());
    if micros < 0 {
        error::negative("wait")
    }
    micros.min(i64::MAX as i128 / 4) as i64
}

pub fn stored_size(argument: &str, bytes: usize) {
    let limit = crate::guc::max_response_bytes();
    if bytes > limit {
        error::too_large(argument, bytes, limit)
    }
}

/// A jsonb argument kept as PostgreSQL's own detoasted value: we hash its text form and hand it back to SPI
/// unchanged, so it is never converted to a Rust value and back (pgrx's `JsonB` parses it with serde).
#[derive(Clone, Copy)]
pub struct RawJsonb {
    detoasted: pg_sys::Datum,
}

impl RawJsonb {
    /// A jsonb value this backend just made (`jsonb_in`'s result: a plain varlena with a 4-byte header).
    pub fn made(value: pg_sys::Datum) -> RawJsonb {
        RawJsonb { detoasted: value }
    }

    pub fn datum(self) -> pg_sys::Datum {
        self.detoasted
    }

    fn container_header(self) -> u32 {
        // SAFETY: `detoasted` is a detoasted jsonb varlena; its data starts with the root container header.
        unsafe {
            let varlena = self.detoasted.cast_mut_ptr::<pg_sys::varlena>();
            let data = pgrx::varlena::vardata_any(varlena) as *const u32;
            data.read_unaligned()
        }
    }

    /// The JSON type of the root value, as a word for messages.
    pub fn root_kind(self) -> &'static str {
        let header = self.container_header();
        if header & pg_sys::JB_FSCALAR != 0 {
            "scalar"
        } else if header & pg_sys::JB_FOBJECT != 0 {
            "object"
        } else {
            "array"
        }
    }

    /// Size of the binary value, without the varlena header: what `idem_keys.max_response_bytes` limits.
    pub fn size(self) -> usize {
        // SAFETY: as above.
        unsafe { pgrx::varlena::varsize_any_exhdr(self.detoasted.cast_mut_ptr()) }
    }

    /// The value's `jsonb_out` text. Written by `jsonb_text` into a buffer the backend keeps (the hot path
    /// of every JSON claim); PostgreSQL's own `JsonbToCString` if that declines.
    pub fn with_text<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: `detoasted` is a detoasted jsonb varlena; its data is the root container.
        let value = unsafe {
            let varlena = self.detoasted.cast_mut_ptr::<pg_sys::varlena>();
            std::slice::from_raw_parts(
                pgrx::varlena::vardata_any(varlena).cast::<u8>(),
                self.size(),
            )
        };
        // Taken out while in use: a nested call, were there one, would start a buffer of its own.
        let mut text = JSONB_TEXT.take();
        if crate::fingerprint::jsonb_text::write(value, &mut text).is_some() {
            let result = f(&text);
            keep_text_buffer(text);
            return result;
        }
        keep_text_buffer(text);
        // SAFETY: jsonb_out of a valid jsonb returns a palloc'd NUL-terminated string, freed after use.
        unsafe {
            let cstring = pg_sys::JsonbToCString(
                std::ptr::null_mut(),
                &mut (*self.detoasted.cast_mut_ptr::<pg_sys::Jsonb>()).root,
                self.size() as i32,
            );
            let result = f(std::ffi::CStr::from_ptr(cstring).to_bytes());
            pg_sys::pfree(cstring.cast());
            result
        }
    }
}

/// The largest text buffer `with_text` keeps between calls.
const KEPT_TEXT_CAPACITY: usize = 64 * 1024;

/// Gives `with_text` its buffer back: the capacity of typical requests, not of a one-off huge one.
fn keep_text_buffer(text: Vec<u8>) {
    if text.capacity() <= KEPT_TEXT_CAPACITY {
        JSONB_TEXT.set(text);
    }
}

thread_local! {
    static JSONB_TEXT: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

impl FromDatum for RawJsonb {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            return None;
        }
        // SAFETY: a non-null jsonb argument. Not the `_packed` variant: JsonbToCString needs the 4-byte
        // header that `pg_detoast_datum` guarantees (it returns the value unchanged when it already has one).
        let detoasted = unsafe { pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) };
        Some(RawJsonb {
            detoasted: pg_sys::Datum::from(detoasted),
        })
    }
}

unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for RawJsonb {
    unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
        unsafe {
            arg.unbox_arg_using_from_datum()
                .expect("jsonb argument must not be null")
        }
    }
}

pgrx::impl_sql_translatable!(RawJsonb, arg_only = "jsonb");
