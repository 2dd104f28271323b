"""The Idempotency-Key header: a Structured Field String, or the bare token Stripe-style clients send."""
from __future__ import annotations

MAX_KEY_LENGTH = 255


def parse_idempotency_key(value: str) -> str | None:
    """The key in one Idempotency-Key field value, or None when the value is malformed.

    `"8e03978e-40d5-43e8"` (printable ASCII between double quotes, `\\"` and `\\\\` the only escapes) and
    `8e03978e-40d5-43e8` (visible ASCII without `"` or `\\`) are the same key. After unquoting it has 1 to 255
    characters. Servers hand field values over as latin-1 text (ASGI's bytes, WSGI's str), so anything above `~`
    is refused here rather than guessed at.
    """
    # HTTP strips the optional whitespace around a field value; a client library may not have.
    value = value.strip(" \t")
    if value.startswith('"'):
        key = _unquote(value)
    else:
        key = value if value and all("!" <= c <= "~" and c not in '"\\' for c in value) else None
    if key is None or not 1 <= len(key) <= MAX_KEY_LENGTH:
        return None
    return key


def _unquote(value: str) -> str | None:
    """The content of an sf-string, or None. Nothing may follow the closing quote: Structured Field parameters
    (`"k";p=1`) would make two spellings of one key."""
    chars: list[str] = []
    i = 1
    while i < len(value):
        c = value[i]
        if c == "\\":
            if i + 1 >= len(value) or value[i + 1] not in '"\\':
                return None
            chars.append(value[i + 1])
            i += 2
        elif c == '"':
            return "".join(chars) if i == len(value) - 1 else None
        elif " " <= c <= "~":
            chars.append(c)
            i += 1
        else:
            return None
    return None  # no closing quote
