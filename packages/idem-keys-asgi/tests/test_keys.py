"""The Idempotency-Key grammar (docs/integrations.md, "The key"): one row per case."""
import pytest

from idem_keys_asgi import parse_idempotency_key

ACCEPTED = [
    ("8e03978e-40d5-43e8", "8e03978e-40d5-43e8"),  # bare, Stripe-style
    ('"8e03978e-40d5-43e8"', "8e03978e-40d5-43e8"),  # a Structured Field String: the same key
    ('"two words"', "two words"),  # a space is printable ASCII
    ('"say \\"hi\\""', 'say "hi"'),  # \" is an escape
    ('"back\\\\slash"', "back\\slash"),  # so is \\
    ("!#$%&'()*+,-./:;<=>?@[]^_`{|}~", "!#$%&'()*+,-./:;<=>?@[]^_`{|}~"),  # every visible non-alnum but " and \
    ("k" * 255, "k" * 255),
    ('"' + "k" * 255 + '"', "k" * 255),  # the limit counts the key, not its quotes
    ('"' + "\\\\" * 255 + '"', "\\" * 255),  # nor its escapes
    (" padded\t", "padded"),  # the optional whitespace around a field value
    ("x", "x"),
]

MALFORMED = [
    "",  # empty
    "   ",
    '""',  # empty after unquoting
    '"unclosed',
    '"trailing backslash\\',
    '"a\\qb"',  # an escape other than \" and \\
    '"ab"c',  # something after the closing quote
    '"abc";p=1',  # Structured Field parameters
    'ab"c',  # a quote inside a bare key
    "back\\slash",  # a backslash in a bare key
    "two words",  # a space in a bare key
    "caf\xe9",  # non-ASCII (ASGI headers are bytes, read as latin-1)
    '"caf\xe9"',
    "tab\there",
    '"tab\there"',  # a tab is not printable ASCII
    "k" * 256,
    '"' + "k" * 256 + '"',
    '"\x7f"',
]


@pytest.mark.parametrize("value,key", ACCEPTED)
def test_accepted(value, key):
    assert parse_idempotency_key(value) == key


@pytest.mark.parametrize("value", MALFORMED)
def test_malformed(value):
    assert parse_idempotency_key(value) is None


@pytest.mark.parametrize(
    ("body", "text"),
    [(b'{"a": 1}', '{"a": 1}'), ('"é"'.encode(), '"é"'), (b"", None), (b"{\xff}", None), (b'{"a": "\x00"}', None)],
)
def test_json_text(body: bytes, text: str | None) -> None:
    """An empty body, invalid UTF-8 or a NUL byte go to the bytes fingerprint without a claim that would only fail."""
    from idem_keys_asgi.store import _as_text

    assert _as_text(body) == text


@pytest.mark.parametrize(
    ("headers", "is_json"),
    [
        ([(b"content-type", b"application/json")], True),
        ([(b"Content-Type", b"Application/JSON; charset=utf-8")], True),
        ([(b"content-type", b"application/merge-patch+json")], True),
        ([(b"content-type", b"application/json"), (b"content-encoding", b"identity")], True),
        ([(b"content-type", b"application/json"), (b"content-encoding", b"gzip")], False),
        ([(b"content-type", b"text/json")], False),
        ([(b"content-type", b"application/jsonx")], False),
        ([], False),
    ],
)
def test_is_json(headers: list[tuple[bytes, bytes]], is_json: bool) -> None:
    """A JSON media type on a body that is not compressed: the same test as the Go and Node middlewares."""
    from idem_keys_asgi.middleware import _is_json

    assert _is_json({"type": "http", "headers": headers}) is is_json
