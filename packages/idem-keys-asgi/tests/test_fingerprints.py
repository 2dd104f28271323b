"""Every fingerprint vector of contract/fingerprints.json through the middleware's claim path, against the database
($DATABASE_URL: the extension or the portable edition), in both modes: the same request replays the first answer,
another is answered 422 key-reused."""
import secrets

import pytest
from starlette.responses import Response

import contract
from conftest import client_for, fresh_key
from test_middleware import Handler, app_for, expect_problem
from test_transactional import small_pool

pytestmark = pytest.mark.anyio
VECTORS = contract.load("fingerprints")["vectors"]


async def send(client, tenant, key, request):
    headers = [("X-Tenant", tenant), ("Idempotency-Key", key), ("Content-Type", request["content_type"])]
    if "content_encoding" in request:
        headers.append(("Content-Encoding", request["content_encoding"]))
    return await client.request(request["method"], request["target"], content=request["body"].encode(),
                                headers=headers)


@pytest.mark.parametrize("transactional", [False, True], ids=["default", "transactional"])
@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
async def test_each_vector(database_url, tenant, vector, transactional):
    handler = Handler(lambda request, attempt: Response(secrets.token_hex(8).encode(), 201))
    async with small_pool(database_url, size=2) as pool:
        async with client_for(app_for(handler, pool, transactional=transactional)) as client:
            key = fresh_key()
            first = await send(client, tenant, key, vector["first"])
            second = await send(client, tenant, key, vector["second"])
    assert first.status_code == 201 and first.headers["idempotency-outcome"] == "claimed"
    if vector["same"]:
        assert second.status_code == 201 and second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content
        assert handler.runs == 1
    else:
        expect_problem(second, 422, "key-reused")
        assert handler.runs == 1
