"""The Idempotency-Key grammar (docs/integrations.md, "The key"): one row per case, and the fingerprint's inputs."""
import pytest
from django.test import RequestFactory

from idem_keys_django import parse_idempotency_key
from idem_keys_django.guard import _is_json, _target
from idem_keys_django.store import _as_text

ACCEPTED = [
    ("8e03978e-40d5-43e8", "8e03978e-40d5-43e8"),  # bare, Stripe-style
    ('"8e03978e-40d5-43e8"', "8e03978e-40d5-43e8"),  # a Structured Field String: the same key
    ('"two words"', "two words"),  # a space is printable ASCII
    ('"say \\"hi\\""', 'say "hi"'),  # \" is an escape
    ('"back\\\\slash"', "back\\slash"),  # so is \\
    ("!#$%&'()*+-./:;<=>?@[]^_`{|}~", "!#$%&'()*+-./:;<=>?@[]^_`{|}~"),  # every visible non-alnum but " \ and ,
    ('"a,b"', "a,b"),  # a comma inside quotes
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
    "one,two",  # two fields, as the server joined them (a bare key with a comma cannot be told from them)
    '"one","two"',  # two quoted fields, joined
    "caf\xe9",  # non-ASCII (header values reach Django as latin-1 text)
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
def test_json_text(body, text):
    """An empty body, invalid UTF-8 or a NUL byte go to the bytes fingerprint without a claim that would only fail."""
    assert _as_text(body) == text


@pytest.mark.parametrize(
    ("meta", "is_json"),
    [
        ({"CONTENT_TYPE": "application/json"}, True),
        ({"CONTENT_TYPE": "Application/JSON; charset=utf-8"}, True),
        ({"CONTENT_TYPE": "application/merge-patch+json"}, True),
        ({"CONTENT_TYPE": "application/json", "HTTP_CONTENT_ENCODING": "identity"}, True),
        ({"CONTENT_TYPE": "application/json", "HTTP_CONTENT_ENCODING": "gzip"}, False),
        ({"CONTENT_TYPE": "text/json"}, False),
        ({"CONTENT_TYPE": "application/jsonx"}, False),
        ({}, False),
    ],
)
def test_is_json(meta, is_json):
    """A JSON media type on a body that is not compressed: the same test as the other middlewares."""
    assert _is_json(meta) is is_json


def test_target_as_the_client_sent_it():
    """The server's raw request target when it has one (gunicorn's RAW_URI, uWSGI's REQUEST_URI): /a%2Fb and /a/b
    stay two requests; else the path Django re-quotes, with the query as sent."""
    factory = RequestFactory()
    assert _target(factory.post("/a/b", RAW_URI="/a%2Fb?x=%41")) == "/a%2Fb?x=%41"
    assert _target(factory.post("/a/b", REQUEST_URI="/a%2fb")) == "/a%2fb"
    assert _target(factory.post("/a b?x=%41")) == "/a%20b?x=%41"
    assert _target(factory.post("/pay")) == "/pay"
