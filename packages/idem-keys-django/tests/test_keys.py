"""Every case of contract/keys.json, through the package's parser and through the middleware; and the target the
fingerprint covers. The grammar itself is idem_keys_core's (tested there): Django sees one value per header name,
the server's join of repeated fields, so a bare value with a comma is refused as the two fields it may have been."""
import pytest
from django.test import RequestFactory

import contract
from conftest import client, expect_problem
from idem_keys_django import parse_idempotency_key
from idem_keys_django.guard import _target

CASES = contract.load("keys")["cases"]


def as_django_parses(case):
    """The contract's key, except for a bare value with a comma (the one rule Django adds)."""
    if "," in case["value"] and not case["value"].startswith('"'):
        return None
    return case["key"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_case_of_the_contract(case):
    assert parse_idempotency_key(case["value"]) == as_django_parses(case)


@pytest.mark.parametrize(("value", "key"), [("one,two", None), ('"one","two"', None), ('"a,b"', "a,b")])
def test_repeated_fields_joined_by_the_server(value, key):
    assert parse_idempotency_key(value) == key


def test_every_case_through_the_middleware(handler, tenant):
    c = client()
    for i, case in enumerate(CASES):
        # A scope per case: two cases may name the same key.
        reply = c.post("/pay", b"{}", content_type="application/json", HTTP_X_TENANT=f"{tenant}-{i}",
                       HTTP_IDEMPOTENCY_KEY=case["value"])
        expected = as_django_parses(case)
        if expected is None:
            expect_problem(reply, 400, "key-malformed")
        else:
            assert reply.status_code == 201, (case["name"], reply.content)
            assert handler.attempts[-1].key == expected, case["name"]
    assert handler.runs == sum(1 for c in CASES if as_django_parses(c) is not None)


def test_target_as_the_client_sent_it():
    """The server's raw request target when it has one (gunicorn's RAW_URI, uWSGI's REQUEST_URI): /a%2Fb and /a/b
    stay two requests; else the path Django re-quotes, with the query as sent."""
    factory = RequestFactory()
    assert _target(factory.post("/a/b", RAW_URI="/a%2Fb?x=%41")) == "/a%2Fb?x=%41"
    assert _target(factory.post("/a/b", REQUEST_URI="/a%2fb")) == "/a%2fb"
    assert _target(factory.post("/a b?x=%41")) == "/a%20b?x=%41"
    assert _target(factory.post("/pay")) == "/pay"
