"""Every fingerprint vector of contract/fingerprints.json through the middleware's claim path, against the database
($DATABASE_URL: the extension or the portable edition), in the default mode and in the transactional one: the same
request replays the first answer, another is answered 422 key-reused."""
import secrets

import pytest
from django.http import HttpResponse

import contract
from conftest import client, expect_problem, fresh_key
from test_middleware import use

VECTORS = contract.load("fingerprints")["vectors"]


def send(c, tenant, key, request):
    extra = {"HTTP_CONTENT_ENCODING": request["content_encoding"]} if "content_encoding" in request else {}
    return c.generic(request["method"], request["target"], request["body"].encode(),
                     content_type=request["content_type"], HTTP_X_TENANT=tenant, HTTP_IDEMPOTENCY_KEY=key, **extra)


@pytest.mark.parametrize("transactional", [False, True], ids=["default", "transactional"])
@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_each_vector(settings, handler, tenant, vector, transactional):
    use(settings, TRANSACTIONAL=transactional, PATHS=None)  # every path: a vector may change it
    handler.answer = lambda request, attempt: HttpResponse(secrets.token_hex(8), status=201)
    c, key = client(), fresh_key()
    first = send(c, tenant, key, vector["first"])
    second = send(c, tenant, key, vector["second"])
    assert first.status_code == 201 and first["Idempotency-Outcome"] == "claimed"
    if vector["same"]:
        assert second.status_code == 201 and second["Idempotent-Replayed"] == "true"
        assert second.content == first.content
    else:
        expect_problem(second, 422, "key-reused")
    assert handler.runs == 1
