// The Idempotency-Key header (docs/integrations.md, "The key"): a Structured Field String as the IETF draft
// has it, "8e03978e-40d5", or the bare token Stripe-style clients send, 8e03978e-40d5. Both name the same key.
'use strict';

const MAX_KEY_LENGTH = 255;

// The key in one header value (without the field's surrounding whitespace), or null when it is malformed.
function parseKey(value) {
  if (typeof value !== 'string') return null;
  const key = value.startsWith('"') ? unquote(value) : bare(value);
  return key !== null && key.length >= 1 && key.length <= MAX_KEY_LENGTH ? key : null;
}

// A bare key: visible ASCII ('!' to '~') without '"' or '\', so it can never be confused with a quoted one.
function bare(value) {
  for (let i = 0; i < value.length; i += 1) {
    const c = value.charCodeAt(i);
    if (c < 0x21 || c > 0x7e || c === 0x22 || c === 0x5c) return null;
  }
  return value;
}

// A quoted key: printable ASCII (space to '~') between double quotes, with \" and \\ as the only escapes and
// nothing after the closing quote (Structured Field parameters such as ;p=1 are refused, not ignored).
function unquote(value) {
  let key = '';
  for (let i = 1; i < value.length; i += 1) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return null;
    if (c === 0x5c) { // backslash
      const next = value[i + 1];
      if (next !== '"' && next !== '\\') return null;
      key += next;
      i += 1;
    } else if (c === 0x22) { // the closing quote must end the value
      return i === value.length - 1 ? key : null;
    } else {
      key += value[i];
    }
  }
  return null; // no closing quote
}

// The one Idempotency-Key of a request: { key }, { missing: true } or { malformed: true }. Node joins repeated
// fields into one string with ", ", which could itself look like a valid key, so the fields are counted in
// rawHeaders: the draft allows exactly one.
function requestKey(req) {
  let count = 0;
  let value;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].toLowerCase() === 'idempotency-key') {
      count += 1;
      value = raw[i + 1].replace(/^[ \t]+|[ \t]+$/g, ''); // the field's optional whitespace
    }
  }
  if (count === 0) return { missing: true };
  const key = count === 1 ? parseKey(value) : null;
  return key === null ? { malformed: true } : { key };
}

module.exports = { parseKey, requestKey };
