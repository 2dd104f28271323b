//! Canonical request fingerprints: SHA-256 over the request, so a retry with the same body matches and a
//! reused key with another body is caught (`mismatch`).
//!
//! For jsonb we hash PostgreSQL's own text form of the value (`jsonb_out`), with one correction. jsonb already
//! stores objects canonically: keys sorted, duplicates resolved (last wins), whitespace gone; so two equal
//! jsonb values print the same text — except for numbers, where `1.0`, `1.00` and `1` are equal as jsonb but
//! print with their own scale. We drop trailing fractional zeros while hashing, and nothing else, so any other
//! difference still changes the fingerprint. The text is streamed into the hasher run by run; no second string
//! is built. This file is pure Rust and is tested without a server (property tests against the server's
//! jsonb parser live in src/tests/fingerprint_props.rs). `jsonb_text` writes that text from a jsonb value's
//! binary form, for the hot path.

pub mod jsonb_text;

use sha2::{Digest, Sha256};

pub type Fingerprint = [u8; 32];

/// SHA-256 of raw bytes: for bytea requests. Equal to PostgreSQL's `sha256(bytea)`.
pub fn of_bytes(bytes: &[u8]) -> Fingerprint {
    Sha256::digest(bytes).into()
}

/// SHA-256 of the canonical form of a `jsonb_out` text.
pub fn of_jsonb_text(text: &[u8]) -> Fingerprint {
    let mut hasher = Sha256::new();
    canonicalize(text, |run| hasher.update(run));
    hasher.finalize().into()
}

/// Walks `jsonb_out` text and hands `emit` the canonical form in runs of bytes.
fn canonicalize(text: &[u8], mut emit: impl FnMut(&[u8])) {
    let mut run_start = 0;
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => i = end_of_string(text, i),
            b'-' | b'0'..=b'9' => {
                let end = end_of_number(text, i);
                let canonical = canonical_number(&text[i..end]);
                if canonical.len() != end - i {
                    emit(&text[run_start..i]);
                    emit(canonical);
                    run_start = end;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    emit(&text[run_start..]);
}

/// Index just past the closing quote of the string that opens at `start`.
fn end_of_string(text: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

fn end_of_number(text: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < text.len() && matches!(text[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
        i += 1;
    }
    i
}

/// `numeric_out` prints plain decimals (never an exponent), so equal numbers differ only in trailing
/// fractional zeros: strip them, then a bare trailing dot, and read `-0` as `0`.
fn canonical_number(number: &[u8]) -> &[u8] {
    if !number.contains(&b'.') {
        return number;
    }
    let mut end = number.len();
    while number[end - 1] == b'0' {
        end -= 1;
    }
    if number[end - 1] == b'.' {
        end -= 1;
    }
    match &number[..end] {
        b"-0" => b"0",
        trimmed => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        let mut out = Vec::new();
        canonicalize(text.as_bytes(), |run| out.extend_from_slice(run));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_lose_only_trailing_fractional_zeros() {
        let cases = [
            ("1", "1"),
            ("1.0", "1"),
            ("1.00", "1"),
            ("10", "10"),
            ("100.500", "100.5"),
            ("-0.000", "0"),
            ("-1.10", "-1.1"),
            ("0.001", "0.001"),
            ("[1.0, 2.50, -3]", "[1, 2.5, -3]"),
            (
                r#"{"a": 1.0, "b": [0.0, 10.10]}"#,
                r#"{"a": 1, "b": [0, 10.1]}"#,
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(canonical(input), expected, "input {input}");
        }
    }

    #[test]
    fn strings_are_left_alone() {
        let cases = [
            r#""1.0""#,
            r#"{"price 1.50": "2.00"}"#,
            r#"["a\"1.0", "\\", "1.0\\"]"#,
            r#"{"k": "\u0000 0.10"}"#,
        ];
        for input in cases {
            assert_eq!(canonical(input), input);
        }
    }

    #[test]
    fn different_values_keep_different_fingerprints() {
        let distinct = [
            "1",
            "1.5",
            "15",
            "-1",
            r#""1""#,
            "[1]",
            r#"{"a": 1}"#,
            r#"{"a": 2}"#,
            r#"{"b": 1}"#,
            "null",
            "true",
            "false",
            "[1, 2]",
            "[2, 1]",
            r#""1.0""#,
        ];
        let mut seen = std::collections::HashSet::new();
        for text in distinct {
            assert!(
                seen.insert(of_jsonb_text(text.as_bytes())),
                "collision on {text}"
            );
        }
    }

    #[test]
    fn bytes_fingerprint_is_plain_sha256() {
        // sha256('') from PostgreSQL / coreutils.
        let empty = of_bytes(b"");
        assert_eq!(
            empty.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
