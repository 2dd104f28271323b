"""From a Powertools idempotency key to an idem_keys key."""
from __future__ import annotations

import hashlib

# idem_keys refuses keys over 255 characters (22023). Counting UTF-8 bytes instead is stricter in every
# database encoding, so a key this keeps is never refused.
MAX_KEY_BYTES = 255
LONG_KEY_PREFIX = "sha256:"


def store_key(idempotency_key: str) -> str:
    """The idem_keys key for a Powertools idempotency key: the key itself when it fits, else `sha256:` and the
    SHA-256 of the whole key in hex (71 characters).

    Powertools builds every key as `f"{function_name}#{hash}"` (`function_name` is the `key_prefix`, or
    `<AWS_LAMBDA_FUNCTION_NAME>.<module>.<qualname>`, of any length; `hash` is the hex digest of the selected
    event data: 32 characters for md5, 128 for sha512). So every key it makes contains `#`, and no mapped key
    does: a mapped key never equals a kept one, and two long keys share a mapped key only if SHA-256 collides.
    """
    if len(idempotency_key.encode("utf-8")) <= MAX_KEY_BYTES:
        return idempotency_key
    return LONG_KEY_PREFIX + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()
