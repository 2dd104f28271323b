"""One FastAPI app: app.add_middleware, an async scope function, request.state.idempotency in a route with a
pydantic body."""
import itertools

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from conftest import Authenticate, client_for, fresh_key
from idem_keys_asgi import IdempotencyMiddleware

pytestmark = pytest.mark.anyio


class Payment(BaseModel):
    amount: int
    currency: str


def payments_app(pool):
    app = FastAPI()
    ids = itertools.count(1)

    async def scope(asgi_scope):
        return asgi_scope["state"].get("tenant")

    @app.post("/payments", status_code=201)
    async def create(payment: Payment, request: Request):
        attempt = request.state.idempotency
        payment_id = next(ids)
        return JSONResponse({"id": payment_id, "amount": payment.amount, "attempt": attempt.outcome}, 201,
                            headers={"Location": f"/payments/{payment_id}"})

    @app.get("/payments/{payment_id}")
    async def read(payment_id: int):
        return {"id": payment_id}

    # add_middleware puts the last one added outermost: authentication runs first.
    app.add_middleware(IdempotencyMiddleware, pool=pool, scope=scope, outcome_header="Idempotency-Outcome")
    app.add_middleware(Authenticate)
    return app


async def test_fastapi(pool, tenant):
    key = fresh_key()
    headers = {"X-Tenant": tenant, "Idempotency-Key": key}
    async with client_for(payments_app(pool)) as client:
        first = await client.post("/payments", json={"amount": 5, "currency": "EUR"}, headers=headers)
        again = await client.post("/payments", json={"currency": "EUR", "amount": 5}, headers=headers)
        other = await client.post("/payments", json={"amount": 6, "currency": "EUR"}, headers=headers)
        invalid_key, invalid = fresh_key(), {"amount": "lots", "currency": "EUR"}
        refused = await client.post("/payments", json=invalid, headers={**headers, "Idempotency-Key": invalid_key})
        refused_again = await client.post("/payments", json=invalid,
                                          headers={**headers, "Idempotency-Key": invalid_key})
        missing = await client.post("/payments", json={"amount": 5, "currency": "EUR"}, headers={"X-Tenant": tenant})
        read = await client.get("/payments/1", headers={"X-Tenant": tenant})
    assert first.status_code == 201 and first.json() == {"id": 1, "amount": 5, "attempt": "claimed"}
    assert again.headers["idempotent-replayed"] == "true" and again.content == first.content
    assert again.headers["location"] == "/payments/1"
    assert other.status_code == 422 and other.json()["code"] == "key-reused"
    # FastAPI's own 422 for a body it cannot validate is an answer like any other: stored, replayed.
    assert refused.status_code == 422 and refused_again.headers["idempotent-replayed"] == "true"
    assert missing.status_code == 400 and missing.json()["code"] == "key-missing"
    assert read.status_code == 200 and "idempotency-outcome" not in read.headers
