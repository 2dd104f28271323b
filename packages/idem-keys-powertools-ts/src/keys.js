// From Powertools' idempotency key to an idem_keys key (1 to 255 characters).
import { createHash } from 'node:crypto';

export const MAX_CHARACTERS = 255; // a scope's limit, as idem_keys counts it
const MAX_KEY_BYTES = 255; // a key's, counted as the Python store counts it (below)

// Powertools' key is `<prefix>#<hash of the payload>`: the prefix is the function's name (or keyPrefix), the
// hash 24 characters (md5) to 88 (sha512), base64. It is used as it is when it fits in 255 UTF-8 bytes (idem_keys
// counts characters; bytes are stricter in every database encoding, and the Python store counts the same way,
// so both map a key alike). A longer one (a long keyPrefix) becomes 'sha256:' and the SHA-256 of its UTF-8 bytes
// in hex (71 characters): such a key has no '#' while every key Powertools makes has one, so a mapped key never
// equals a key used as it is, and two mapped keys are equal only if the keys were (or SHA-256 collides).
export function storeKey(idempotencyKey) {
  if (Buffer.byteLength(idempotencyKey, 'utf8') <= MAX_KEY_BYTES) return idempotencyKey;
  return `sha256:${createHash('sha256').update(idempotencyKey, 'utf8').digest('hex')}`;
}

// PostgreSQL counts characters (code points), not UTF-16 units as String.length does.
export function characters(text) {
  let count = 0;
  for (const _ of text) count += 1;
  return count;
}
