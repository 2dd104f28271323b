"""What the fingerprint is made of, and which claim is tried first: the JSON form only for a JSON body the server
may read as jsonb, else (or when it refuses it) the bytes form."""
import pytest

from idem_keys_core import Request, sql, statements


@pytest.mark.parametrize(("content_type", "content_encoding", "is_json"), [
    ("application/json", None, True),
    ("Application/JSON; charset=utf-8", None, True),
    ("application/merge-patch+json", None, True),
    ("application/json", "identity", True),
    ("application/json", "", True),
    ("application/json", "gzip", False),
    ("text/json", None, False),
    ("application/jsonx", None, False),
    (None, None, False),
])
def test_is_json(content_type, content_encoding, is_json):
    assert statements.is_json(content_type, content_encoding) is is_json


@pytest.mark.parametrize(("body", "text"), [
    (b'{"a": 1}', '{"a": 1}'), ('"é"'.encode(), '"é"'), (b"", None), (b"{\xff}", None), (b'{"a": "\x00"}', None),
])
def test_json_text(body, text):
    """An empty body, invalid UTF-8 or a NUL byte go to the bytes form without a claim that would only fail."""
    assert statements.json_text(body) == text


@pytest.mark.parametrize("body", [b"", b"{\xff}", b'{"a": "\x00"}'])
def test_a_json_body_the_server_cannot_take_as_text_claims_by_its_bytes(body):
    claims = statements.claim_statements("s", "k", Request("POST", "/p", body, is_json=True), None, None)
    assert [c.sql for c in claims] == [sql.CLAIM_BYTES]


def test_another_body_claims_by_its_bytes_only():
    claims = statements.claim_statements("s", "k", Request("POST", "/p", b'{"a": 1}', is_json=False), None, None)
    assert [c.sql for c in claims] == [sql.CLAIM_BYTES]


def test_the_target_keeps_every_byte():
    """Latin-1 text: the raw target's bytes go into the bytes form unchanged."""
    assert Request("POST", "/caf\xe9?q=%41", b"x", False).as_bytes() == b"POST /caf\xe9?q=%41\nx"


@pytest.mark.parametrize(("sqlstate", "refused"), [("22P02", True), ("22P05", True), ("22021", True),
                                                   ("23505", False), (None, False)])
def test_what_sends_the_bytes_form_next(sqlstate, refused):
    assert statements.refused_as_json(sqlstate) is refused


def test_a_claims_row():
    claim = statements.claim_from_row(("replay", 3, 201, memoryview(b"paid"), '{"Location": "/p/1"}', None))
    assert claim == statements.Claim("replay", 3, 201, b"paid", {"Location": "/p/1"}, None)
    assert not claim.runs
    assert statements.claim_from_row(("claimed", 4, None, None, None, None)).runs
    assert statements.claim_from_row(("recovered", 5, None, None, {}, None)).runs
    with pytest.raises(RuntimeError):
        statements.claim_from_row(None)


def test_a_releases_row():
    assert statements.released_from_row((True,)) is True
    assert statements.released_from_row((False,)) is False
    assert statements.released_from_row(None) is False
