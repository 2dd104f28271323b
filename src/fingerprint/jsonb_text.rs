//! `jsonb_out`'s text of a jsonb value, written by reading the binary value directly.
//!
//! A JSON request's fingerprint is SHA-256 over its `jsonb_out` text (fingerprint/mod.rs). PostgreSQL's
//! `JsonbToCString` builds that text through its generic iterator, a palloc'd `JsonbValue` per token, a
//! `numeric_out` call (and its string) per number and a `StringInfo` grown a character at a time: about
//! 5,000 instructions for a typical 100-byte request, on every claim (bench/callgrind_replay.sh). This
//! walks the on-disk format (src/include/utils/jsonb.h and numeric.c's layout) once, writing into a
//! buffer the backend keeps. The output must be byte for byte `jsonb_out`'s, or fingerprints would change:
//! `src/tests/mod.rs` compares the two on every major. Anything this does not recognise (a numeric NaN or
//! infinity, which jsonb never stores; a truncated value; a value nested deeper than `MAX_DEPTH` or larger
//! than `MAX_VALUE_BYTES`; a big-endian machine) returns `None`, and the caller asks PostgreSQL.
//!
//! Pure Rust over the value's bytes (the varlena's data, after its 4-byte header); no server calls.

// jsonb.h: the container header and the per-child JEntry.
const JB_CMASK: u32 = 0x0FFF_FFFF;
const JB_FSCALAR: u32 = 0x1000_0000;
const JB_FOBJECT: u32 = 0x2000_0000;
const JENTRY_OFFLENMASK: u32 = 0x0FFF_FFFF;
const JENTRY_TYPEMASK: u32 = 0x7000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_ISNUMERIC: u32 = 0x1000_0000;
const JENTRY_ISBOOL_FALSE: u32 = 0x2000_0000;
const JENTRY_ISBOOL_TRUE: u32 = 0x3000_0000;
const JENTRY_ISNULL: u32 = 0x4000_0000;
const JENTRY_ISCONTAINER: u32 = 0x5000_0000;

// numeric.c: the short and long headers of a numeric, base-10000 digits.
const NUMERIC_SIGN_MASK: u16 = 0xC000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_SHORT: u16 = 0x8000;
const NUMERIC_SHORT_SIGN_MASK: u16 = 0x2000;
const NUMERIC_SHORT_DSCALE_MASK: u16 = 0x1F80;
const NUMERIC_SHORT_DSCALE_SHIFT: u16 = 7;
const NUMERIC_SHORT_WEIGHT_SIGN_MASK: u16 = 0x0040;
const NUMERIC_SHORT_WEIGHT_MASK: u16 = 0x003F;
const NUMERIC_DSCALE_MASK: u16 = 0x3FFF;

/// Containers nested deeper than this are left to PostgreSQL: this walk recurses (two frames a level) where
/// `JsonbToCString` iterates, and a server whose `max_stack_depth` was raised can store values deep enough
/// to overflow a Rust stack, which is a crash, not an ERROR. Requests nest a few levels.
pub const MAX_DEPTH: usize = 100;

/// Values larger than this are left to PostgreSQL, whose `StringInfo` stops at 1 GB with an ERROR where a
/// failed Rust allocation would abort the backend (escaping can make the text 6 times the value).
pub const MAX_VALUE_BYTES: usize = 1 << 20;

/// Replaces `out` with the `jsonb_out` text of the jsonb whose data (after the varlena header) is `value`.
pub fn write(value: &[u8], out: &mut Vec<u8>) -> Option<()> {
    out.clear();
    // The numeric varlena headers are read in their little-endian layout.
    if cfg!(target_endian = "big") || value.len() > MAX_VALUE_BYTES {
        return None;
    }
    container(value, 0, out)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn int_align(offset: usize) -> usize {
    (offset + 3) & !3
}

/// One container: `{"k": v, …}`, `[v, …]`, or a root scalar's value alone (jsonb stores it as a
/// one-element array flagged as a scalar, which jsonb_out prints without brackets). `depth` is 0 for the
/// root.
fn container(bytes: &[u8], depth: usize, out: &mut Vec<u8>) -> Option<()> {
    let header = u32_at(bytes, 0)?;
    let count = (header & JB_CMASK) as usize;
    // Only the root may be a scalar, an array of one (jsonb_out prints anything else oddly).
    if depth > MAX_DEPTH
        || (header & JB_FSCALAR != 0 && (depth > 0 || count != 1 || header & JB_FOBJECT != 0))
    {
        return None;
    }
    let children = Children::new(
        bytes,
        if header & JB_FOBJECT != 0 {
            count * 2
        } else {
            count
        },
    )?;
    if header & JB_FOBJECT != 0 {
        out.push(b'{');
        for i in 0..count {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            // Keys are strings; jsonb keeps them sorted, and the values follow all the keys.
            let (kind, key) = children.get(i)?;
            if kind != JENTRY_ISSTRING {
                return None;
            }
            string(key, out);
            out.extend_from_slice(b": ");
            let (kind, value) = children.get(count + i)?;
            scalar_or_container(kind, value, depth, out)?;
        }
        out.push(b'}');
    } else if header & JB_FSCALAR != 0 {
        let (kind, value) = children.get(0)?;
        scalar_or_container(kind, value, depth, out)?;
    } else {
        out.push(b'[');
        for i in 0..count {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            let (kind, value) = children.get(i)?;
            scalar_or_container(kind, value, depth, out)?;
        }
        out.push(b']');
    }
    Some(())
}

/// A container's JEntry array and the data after it.
struct Children<'a> {
    entries: &'a [u8],
    data: &'a [u8],
}

impl<'a> Children<'a> {
    fn new(bytes: &'a [u8], n: usize) -> Option<Children<'a>> {
        let end = 4usize.checked_add(n.checked_mul(4)?)?;
        Some(Children {
            entries: bytes.get(4..end)?,
            data: bytes.get(end..)?,
        })
    }

    fn entry(&self, i: usize) -> Option<u32> {
        u32_at(self.entries, i * 4)
    }

    /// Child `i`'s type and bytes. Most JEntries hold a length; every 32nd holds its end offset instead,
    /// so a child's start is the sum of the lengths back to the nearest stored offset (getJsonbOffset).
    /// Numerics and containers start after padding to a 4-byte boundary of the data area (fillJsonbValue's
    /// `INTALIGN(offset)`); the bytes returned start after it.
    fn get(&self, i: usize) -> Option<(u32, &'a [u8])> {
        let mut start = 0usize;
        for j in (0..i).rev() {
            let entry = self.entry(j)?;
            start = start.checked_add((entry & JENTRY_OFFLENMASK) as usize)?;
            if entry & JENTRY_HAS_OFF != 0 {
                break;
            }
        }
        let entry = self.entry(i)?;
        let field = (entry & JENTRY_OFFLENMASK) as usize;
        let end = if entry & JENTRY_HAS_OFF != 0 {
            field
        } else {
            start.checked_add(field)?
        };
        let kind = entry & JENTRY_TYPEMASK;
        if matches!(kind, JENTRY_ISNUMERIC | JENTRY_ISCONTAINER) {
            start = int_align(start);
        }
        Some((kind, self.data.get(start..end)?))
    }
}

fn scalar_or_container(kind: u32, child: &[u8], depth: usize, out: &mut Vec<u8>) -> Option<()> {
    match kind {
        JENTRY_ISSTRING => string(child, out),
        JENTRY_ISBOOL_TRUE => out.extend_from_slice(b"true"),
        JENTRY_ISBOOL_FALSE => out.extend_from_slice(b"false"),
        JENTRY_ISNULL => out.extend_from_slice(b"null"),
        JENTRY_ISNUMERIC => numeric(child, out)?,
        JENTRY_ISCONTAINER => container(child, depth + 1, out)?,
        _ => return None,
    }
    Some(())
}

/// escape_json: the string in double quotes, with `"`, `\` and the control characters escaped.
fn string(text: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    let mut run = 0;
    for (i, &byte) in text.iter().enumerate() {
        let escaped: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0C => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1F => b"",
            _ => continue,
        };
        out.extend_from_slice(&text[run..i]);
        run = i + 1;
        if escaped.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(byte >> 4) as usize]);
            out.push(HEX[(byte & 0xF) as usize]);
        } else {
            out.extend_from_slice(escaped);
        }
    }
    out.extend_from_slice(&text[run..]);
    out.push(b'"');
}

/// numeric_out (get_str_from_var): sign, the integer part without leading zeros ("0" if none), and
/// exactly the display scale's fractional digits. `bytes` is the numeric varlena, with its header.
fn numeric(bytes: &[u8], out: &mut Vec<u8>) -> Option<()> {
    let first = *bytes.first()?;
    // A 1-byte varlena header has its low bit set (little-endian layout); 0x01 alone is a TOAST pointer.
    let (size, body) = if first & 0x01 != 0 && first != 0x01 {
        ((first >> 1) as usize, bytes.get(1..)?)
    } else if first & 0x03 == 0 {
        ((u32_at(bytes, 0)? >> 2) as usize, bytes.get(4..)?)
    } else {
        return None;
    };
    let header_size = bytes.len() - body.len();
    let body = body.get(..size.checked_sub(header_size)?)?;
    let n_header = u16_at(body, 0)?;
    let (negative, dscale, weight, digits) = if n_header & NUMERIC_SIGN_MASK == NUMERIC_SIGN_MASK {
        return None; // NaN and the infinities: jsonb rejects them
    } else if n_header & NUMERIC_SHORT != 0 {
        let magnitude = (n_header & NUMERIC_SHORT_WEIGHT_MASK) as i32;
        let weight = if n_header & NUMERIC_SHORT_WEIGHT_SIGN_MASK != 0 {
            magnitude - 64
        } else {
            magnitude
        };
        let dscale = (n_header & NUMERIC_SHORT_DSCALE_MASK) >> NUMERIC_SHORT_DSCALE_SHIFT;
        (
            n_header & NUMERIC_SHORT_SIGN_MASK != 0,
            dscale,
            weight,
            body.get(2..)?,
        )
    } else {
        let weight = u16_at(body, 2)? as i16 as i32;
        let dscale = n_header & NUMERIC_DSCALE_MASK;
        (
            n_header & NUMERIC_SIGN_MASK == NUMERIC_NEG,
            dscale,
            weight,
            body.get(4..)?,
        )
    };
    let ndigits = digits.len() / 2;
    let digit = |d: i32| -> u16 {
        if d >= 0 && (d as usize) < ndigits {
            u16_at(digits, d as usize * 2).unwrap_or(0)
        } else {
            0
        }
    };
    if negative {
        out.push(b'-');
    }
    let mut d: i32;
    if weight < 0 {
        d = weight + 1;
        out.push(b'0');
    } else {
        d = 0;
        while d <= weight {
            let value = digit(d);
            let decimal = [value / 1000, value / 100 % 10, value / 10 % 10, value % 10];
            // The first base-10000 digit loses its leading decimal zeros (but keeps its last).
            let skip = if d == 0 {
                decimal.iter().take(3).take_while(|&&x| x == 0).count()
            } else {
                0
            };
            out.extend(decimal[skip..].iter().map(|&x| b'0' + x as u8));
            d += 1;
        }
    }
    if dscale > 0 {
        out.push(b'.');
        let mut left = dscale as usize;
        while left > 0 {
            let value = digit(d);
            let decimal = [value / 1000, value / 100 % 10, value / 10 % 10, value % 10];
            let take = left.min(4);
            out.extend(decimal[..take].iter().map(|&x| b'0' + x as u8));
            left -= take;
            d += 1;
        }
    }
    Some(())
}
