"""The HTTP suite's sample payments app (tests/http/README.md) on idem-keys-asgi: Starlette, served by uvicorn
(serve.sh). DATABASE_URL names a database with idem_keys; IDEM_LEASE and IDEM_WAIT are PostgreSQL intervals;
IDEM_OFF=1 runs it without the middleware (the benchmark's baseline)."""
import asyncio
import json
import logging
import os
import re
import secrets
from contextlib import asynccontextmanager

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route

from idem_keys_asgi import IdempotencyMiddleware

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
BEARER = re.compile(r"Bearer ([A-Za-z0-9_-]{1,64})")
SLOW = re.compile(r"cus_slow_([0-9]{1,5})")
MAX_SLEEP_MS = 60000

# Autocommit: the claim commits before the handler runs and the answer before the client sees it (two-step
# mode). The pool's timeout bounds how long a request waits for a connection, so a database that went away
# answers 503 in seconds rather than hanging the client.
pool = AsyncConnectionPool(os.environ["DATABASE_URL"], min_size=2, max_size=20, timeout=5,
                           kwargs={"autocommit": True}, open=False)


@asynccontextmanager
async def lifespan(app):
    await pool.open(wait=True, timeout=30)
    try:
        await create_table()
        yield
    finally:
        await pool.close()


async def create_table():
    # Apps starting side by side would race CREATE TABLE IF NOT EXISTS on the catalog (a unique violation):
    # the lock, held to the end of this transaction, lets one create it and the others find it.
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('idem_keys sample app: payments table'))")
        await conn.execute("""CREATE TABLE IF NOT EXISTS payments (
            id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text, amount bigint NOT NULL,
            currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())""")


def problem(status, title, code, detail, headers=None):
    """The app's own errors, in the same problem+json shape as the middleware's."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "code": code}
    return JSONResponse(body, status, headers=headers, media_type="application/problem+json")


class Authenticate:
    """A stand-in for real authentication, outside the middleware: the tenant from `Authorization: Bearer
    <tenant>`, put in the request state, where the middleware's scope function reads it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        bearer = BEARER.fullmatch(authorization)
        if bearer is None:
            response = problem(401, "Unauthorized", "unauthenticated", "Authorization: Bearer <tenant> is required",
                               {"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["tenant"] = bearer[1]
        await self.app(scope, receive, send)


def tenant_scope(scope):
    return scope["state"].get("tenant")


def valid(pay):
    return (isinstance(pay, dict) and type(pay.get("amount")) is int and 0 < pay["amount"] < 2**63
            and isinstance(pay.get("currency"), str) and re.fullmatch(r"[A-Za-z]{3}", pay["currency"]) is not None
            and isinstance(pay.get("customer_id"), str) and pay["customer_id"] != "")


async def create_payment(request):
    tenant = request.state.tenant
    attempt = getattr(request.state, "idempotency", None)  # None with IDEM_OFF=1
    try:
        pay = json.loads(await request.body())
    except ValueError:
        pay = None
    if not valid(pay):
        return problem(400, "Bad Request", "invalid-payment",
                       "amount (an integer > 0), currency (3 letters) and customer_id (a string) are required")
    customer = pay["customer_id"]
    slow = SLOW.fullmatch(customer)
    if slow:
        await asyncio.sleep(min(int(slow[1]), MAX_SLEEP_MS) / 1000)
    elif customer == "cus_fail_503":
        return problem(503, "Service Unavailable", "provider-unavailable", "the provider refused; nothing was charged",
                       {"Retry-After": "1"})
    elif customer == "cus_fail_402":
        return problem(402, "Payment Required", "card-declined", "the card was declined")
    elif customer == "cus_throw":
        raise RuntimeError("cus_throw: the handler throws")
    elif customer == "cus_unsettled":
        if attempt:
            attempt.leave_unsettled()  # maybe charged: the next retry recovers the key and looks first
        return problem(502, "Bad Gateway", "provider-unreachable", "the provider did not answer: maybe charged")

    key = attempt.key if attempt else None
    row = None
    async with pool.connection() as conn:
        if attempt and attempt.recovered:
            # The previous owner died (or outlived its lease) after its claim: it may have paid already.
            cur = await conn.execute("SELECT id, tenant, amount, currency, customer_id FROM payments "
                                     "WHERE tenant = %s AND idempotency_key = %s ORDER BY id LIMIT 1", (tenant, key))
            row = await cur.fetchone()
        if row is None:
            cur = await conn.execute("INSERT INTO payments (tenant, idempotency_key, amount, currency, customer_id) "
                                     "VALUES (%s, %s, %s, %s, %s) RETURNING id, tenant, amount, currency, customer_id",
                                     (tenant, key, pay["amount"], pay["currency"], customer))
            row = await cur.fetchone()
    body = payment_json(row)
    body["attempt"] = attempt.outcome if attempt else "claimed"
    return JSONResponse(body, 201, headers={"Location": f"/payments/{row[0]}", "X-Request-Id": secrets.token_hex(8)})


async def read_payment(request):
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT id, tenant, amount, currency, customer_id FROM payments "
                                 "WHERE id = %s AND tenant = %s", (request.path_params["id"], request.state.tenant))
        row = await cur.fetchone()
    if row is None:
        return problem(404, "Not Found", "payment-not-found", "no such payment for this tenant")
    return JSONResponse(payment_json(row))


def payment_json(row):
    return dict(zip(("id", "tenant", "amount", "currency", "customer_id"), row))


async def server_error(request, exc):
    """Starlette's ServerErrorMiddleware answers an exception outside every added middleware; the attempt is in
    the request state all the same, so this 500 names its outcome too (the key was released)."""
    attempt = getattr(request.state, "idempotency", None)
    return problem(500, "Internal Server Error", "internal-error", "the handler failed",
                   {"Idempotency-Outcome": attempt.outcome} if attempt else None)


middleware = [Middleware(Authenticate)]
if os.environ.get("IDEM_OFF") != "1":
    middleware.append(Middleware(IdempotencyMiddleware, pool=pool, scope=tenant_scope,
                                 lease=os.environ.get("IDEM_LEASE", "30s"), wait=os.environ.get("IDEM_WAIT") or None,
                                 outcome_header="Idempotency-Outcome"))
app = Starlette(routes=[Route("/payments", create_payment, methods=["POST"]),
                        Route("/payments/{id:int}", read_payment, methods=["GET"])],
                middleware=middleware, exception_handlers={Exception: server_error}, lifespan=lifespan)
