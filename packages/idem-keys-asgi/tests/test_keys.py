"""Every case of contract/keys.json through the middleware: a key it parses is claimed under that key, a malformed
one is answered 400 key-malformed (the parser itself is idem_keys_core's, tested there)."""
import pytest

import contract
from conftest import client_for
from test_middleware import Handler, app_for, expect_problem

pytestmark = pytest.mark.anyio
CASES = contract.load("keys")["cases"]


async def test_every_case_of_the_contract(pool, tenant):
    handler = Handler()
    async with client_for(app_for(handler, pool)) as client:
        for case in CASES:
            # Unique per run: the same key value is claimed again by the next run, in the same scope.
            sent = case["value"].encode("latin-1")
            reply = await client.post("/pay", content=b"{}", headers=[
                (b"X-Tenant", f"{tenant}-{CASES.index(case)}".encode()), (b"Content-Type", b"application/json"),
                (b"Idempotency-Key", sent)])
            if case["key"] is None:
                expect_problem(reply, 400, "key-malformed")
            else:
                assert reply.status_code == 201, (case["name"], reply.text)
                assert handler.attempts[-1].key == case["key"], case["name"]
    assert handler.runs == sum(1 for c in CASES if c["key"] is not None)
