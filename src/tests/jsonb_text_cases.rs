//! In the server: `jsonb_text::write` against PostgreSQL's own `JsonbToCString`, byte for byte, on
//! hand-picked values and a few thousand generated documents (the fingerprint hashes this text, so any
//! difference would change fingerprints).

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::{CStr, CString};

/// Values where a formatter goes wrong: numbers of every weight and scale (short and long numeric
/// headers), escapes and control characters, Unicode, empty and nested containers, root scalars, and
/// containers past the 32-child stride at which JEntries store offsets instead of lengths.
fn hand_picked() -> Vec<String> {
    let mut cases: Vec<String> = [
        "0", "-0", "0.0", "-0.000", "1", "-1", "10", "100", "1000", "9999", "10000", "10001",
        "123456789012345678901234567890", "0.1", "0.01", "0.0001", "0.00001", "0.000000001",
        "1.10", "100.500", "-12345678.90000", "1e-7", "1.5E-20", "3E+20", "1e100", "-1e-100",
        "12345.6789", "0.5", "99999999.99999999", "1.000000000000000000001", "2.0e3",
        "true", "false", "null", "\"\"", "\"a\"", "[]", "{}", "[[]]", "[{}]", "{\"a\": {}}",
        r#""quote \" backslash \\ slash / tab \t nl \n cr \r bs \b ff \f""#,
        r#""\u0001\u001f\u007f é 😀 \u00e9""#, r#"{"k\"ey": "v\\al"}"#,
        r#"{"b": 1, "a": 2, "aa": [1, "x", null, true, false, 1.50], "c": {"d": {"e": []}}}"#,
        r#"{"amount": 1000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}"#,
    ]
    .map(String::from)
    .to_vec();
    let many = |n: usize| (0..n).map(|i| format!("{i}.{}", i % 7)).collect::<Vec<_>>();
    cases.push(format!("[{}]", many(70).join(", ")));
    cases.push(format!(
        "{{{}}}",
        (0..70)
            .map(|i| format!("\"k{i}\": [\"v{i}\", {i}.50]"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    cases.push(format!("[\"{}\"]", "long ".repeat(400)));
    cases
}

/// A small deterministic generator (xorshift), so a failure names its document and reruns the same way.
struct Gen(u64);

impl Gen {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }

    fn number(&mut self) -> String {
        let sign = if self.next(3) == 0 { "-" } else { "" };
        let int = match self.next(4) {
            0 => "0".to_string(),
            1 => self.next(10).to_string(),
            2 => self.next(1_000_000).to_string(),
            _ => format!(
                "{}{:09}",
                self.next(1_000_000_000),
                self.next(1_000_000_000)
            ),
        };
        let frac = match self.next(3) {
            0 => String::new(),
            _ => {
                let digits = self.next(12);
                format!(
                    ".{}",
                    (0..digits)
                        .map(|_| self.next(10).to_string())
                        .collect::<String>()
                )
            }
        };
        let exp = match self.next(5) {
            0 => format!(
                "e{}{}",
                if self.next(2) == 0 { "-" } else { "+" },
                self.next(40)
            ),
            _ => String::new(),
        };
        let frac = if frac == "." { ".0".into() } else { frac };
        format!("{sign}{int}{frac}{exp}")
    }

    fn string(&mut self) -> String {
        const PIECES: [&str; 12] = [
            "a", "Z", "0", " ", "\\\"", "\\\\", "\\n", "\\u0001", "\\u001f", "é", "😀", "/",
        ];
        let len = self.next(10);
        format!(
            "\"{}\"",
            (0..len)
                .map(|_| PIECES[self.next(12) as usize])
                .collect::<String>()
        )
    }

    /// Mostly small containers; one in eight past the 32-child stride.
    fn size(&mut self) -> u64 {
        let below = if self.next(8) == 0 { 40 } else { 5 };
        self.next(below)
    }

    fn value(&mut self, depth: u32) -> String {
        match self.next(if depth >= 3 { 5 } else { 7 }) {
            0 => "null".into(),
            1 => ["true", "false"][self.next(2) as usize].into(),
            2 | 3 => self.number(),
            4 => self.string(),
            5 => {
                let n = self.size();
                let items: Vec<String> = (0..n).map(|_| self.value(depth + 1)).collect();
                format!("[{}]", items.join(", "))
            }
            _ => {
                let n = self.size();
                let mut pairs = Vec::new();
                for _ in 0..n {
                    let key = self.string();
                    pairs.push(format!("{key}: {}", self.value(depth + 1)));
                }
                format!("{{{}}}", pairs.join(", "))
            }
        }
    }
}

/// jsonb_in's value of `json`: what `jsonb_text::write` makes of it, and PostgreSQL's `JsonbToCString` text.
fn both_texts(json: &str) -> (Option<Vec<u8>>, Vec<u8>) {
    let input = CString::new(json).unwrap();
    // SAFETY: jsonb_in of a valid document returns a jsonb in the current memory context; both texts are
    // read from it before the transaction (the test's) ends.
    unsafe {
        let datum = pg_sys::OidInputFunctionCall(
            pg_sys::Oid::from(pg_sys::F_JSONB_IN),
            input.as_ptr().cast_mut(),
            pg_sys::InvalidOid,
            -1,
        );
        let varlena = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
        let size = pgrx::varlena::varsize_any_exhdr(varlena);
        let expected = CStr::from_ptr(pg_sys::JsonbToCString(
            std::ptr::null_mut(),
            &mut (*varlena.cast::<pg_sys::Jsonb>()).root,
            size as i32,
        ))
        .to_bytes()
        .to_vec();
        let value =
            std::slice::from_raw_parts(pgrx::varlena::vardata_any(varlena).cast::<u8>(), size);
        let mut written = Vec::new();
        let written = crate::fingerprint::jsonb_text::write(value, &mut written).map(|()| written);
        (written, expected)
    }
}

fn assert_same_text(json: &str) {
    let (written, expected) = both_texts(json);
    let written = written.unwrap_or_else(|| panic!("declined: {json}"));
    assert_eq!(
        String::from_utf8_lossy(&written),
        String::from_utf8_lossy(&expected),
        "input: {json}"
    );
}

/// A value past a limit is declined, and its fingerprint (idem_fingerprint, the same `with_text` a claim
/// uses) is then that of PostgreSQL's own text.
fn assert_declined(json: &str, what: &str) {
    assert!(both_texts(json).0.is_none(), "not declined: {what}");
    let (fingerprint, text) = Spi::get_two_with_args::<Vec<u8>, String>(
        "SELECT idem_fingerprint($1::jsonb), $1::jsonb::text",
        &[json.into()],
    )
    .unwrap();
    let from_text = crate::fingerprint::of_jsonb_text(text.unwrap().as_bytes());
    assert_eq!(fingerprint.as_deref(), Some(&from_text[..]), "{what}");
}

/// The limits of the walk: nesting (it recurses, PostgreSQL iterates) and size (its buffer is not PostgreSQL's).
pub fn check_limits() {
    use crate::fingerprint::jsonb_text::{MAX_DEPTH, MAX_VALUE_BYTES};
    let nested = |levels: usize| format!("{}1{}", "[".repeat(levels), "]".repeat(levels));
    // The root is depth 0: MAX_DEPTH + 1 arrays reach depth MAX_DEPTH.
    assert_same_text(&nested(MAX_DEPTH + 1));
    assert_declined(&nested(MAX_DEPTH + 2), "one level too deep");
    assert_declined(&nested(1_000), "1,000 levels");
    let string = |bytes: usize| format!("[\"{}\"]", "x".repeat(bytes));
    assert_same_text(&string(MAX_VALUE_BYTES - 64));
    assert_declined(&string(MAX_VALUE_BYTES), "a value past MAX_VALUE_BYTES");
}

pub fn check_all() {
    for case in hand_picked() {
        assert_same_text(&case);
    }
    let mut generator = Gen(0x9E37_79B9_7F4A_7C15);
    for _ in 0..3000 {
        let doc = generator.value(0);
        assert_same_text(&doc);
    }
}
