"""The HTTP suite's sample payments app (tests/http/README.md) on idem-keys-asgi: Starlette, served by uvicorn
(serve.sh). DATABASE_URL names a database with idem_keys; IDEM_LEASE and IDEM_WAIT are seconds ("4", or "4s");
IDEM_OFF=1 runs it without the middleware (the benchmark's baseline); IDEM_TX=1 runs the middleware in
transactional mode, and the handler's SQL on its transaction's connection."""
import asyncio
import json
import logging
import os
import re
import secrets
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route

from idem_keys_asgi import IdempotencyMiddleware

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
BEARER = re.compile(r"Bearer ([A-Za-z0-9_-]{1,64})")
SLOW = re.compile(r"cus_slow_([0-9]{1,5})")
CRASH_AFTER_WRITE = re.compile(r"cus_crash_after_write_([0-9]{1,5})")
MAX_SLEEP_MS = 60000

# Autocommit: the claim commits before the handler runs and the answer before the client sees it (two-step
# mode); with IDEM_TX=1 the middleware wraps them and the handler's SQL in one transaction of its own. The pool's
# timeout bounds how long a request waits for a connection, so a database that went away answers 503 in seconds
# rather than hanging the client.
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
        # cus_commit_fails' two equal rows: refused at COMMIT in transactional mode, at once otherwise.
        await conn.execute("CREATE TABLE IF NOT EXISTS commit_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)")


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
    async with connection_for(attempt) as conn:
        if attempt and attempt.recovered:
            # The previous owner died (or outlived its lease) after its claim: it may have paid already.
            try:
                cur = await conn.execute("SELECT id, tenant, amount, currency, customer_id FROM payments "
                                         "WHERE tenant = %s AND idempotency_key = %s ORDER BY id LIMIT 1",
                                         (tenant, key))
                row = await cur.fetchone()
            except psycopg.Error as e:
                logging.warning("payments lookup: %s", e)
                return problem(503, "Service Unavailable", "database-unavailable", "try again")
        if row is None:
            try:
                cur = await conn.execute(
                    "INSERT INTO payments (tenant, idempotency_key, amount, currency, customer_id) "
                    "VALUES (%s, %s, %s, %s, %s) RETURNING id, tenant, amount, currency, customer_id",
                    (tenant, key, pay["amount"], pay["currency"], customer))
                row = await cur.fetchone()
                if customer == "cus_commit_fails":
                    # Deferred: in a transaction the duplicate is refused by COMMIT, after the answer is stored.
                    await conn.execute("INSERT INTO commit_guard VALUES (1), (1)")
            except psycopg.Error as e:
                # 503 releases the key (in transactional mode the insert is rolled back with it): the retry pays.
                logging.warning("payments insert: %s", e)
                return problem(503, "Service Unavailable", "database-unavailable", "nothing was charged: try again",
                               {"Retry-After": "1"})
    if customer == "cus_throw_after_write":
        raise RuntimeError("cus_throw_after_write: the handler throws after its insert")
    crash = CRASH_AFTER_WRITE.fullmatch(customer)
    if crash:
        # Time for a test to SIGKILL the app after the write and before the answer.
        await asyncio.sleep(min(int(crash[1]), MAX_SLEEP_MS) / 1000)
    body = payment_json(row)
    body["attempt"] = attempt.outcome if attempt else "claimed"
    return JSONResponse(body, 201, headers={"Location": f"/payments/{row[0]}", "X-Request-Id": secrets.token_hex(8)})


@asynccontextmanager
async def connection_for(attempt):
    """The middleware's connection, in the transaction that holds the claim (IDEM_TX=1), or one from the pool."""
    if attempt is not None and attempt.connection is not None:
        yield attempt.connection
    else:
        async with pool.connection() as conn:
            yield conn


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


def seconds(name, default=None):
    """An environment variable of seconds: "4", or "4s" as the suite used to send it."""
    value = os.environ.get(name) or default
    return None if value is None else float(value.removesuffix("s"))


middleware = [Middleware(Authenticate)]
if os.environ.get("IDEM_OFF") != "1":
    middleware.append(Middleware(IdempotencyMiddleware, pool=pool, scope=tenant_scope,
                                 lease=seconds("IDEM_LEASE", "30"), wait=seconds("IDEM_WAIT"),
                                 outcome_header="Idempotency-Outcome",
                                 transactional=os.environ.get("IDEM_TX") == "1"))
app = Starlette(routes=[Route("/payments", create_payment, methods=["POST"]),
                        Route("/payments/{id:int}", read_payment, methods=["GET"])],
                middleware=middleware, exception_handlers={Exception: server_error}, lifespan=lifespan)
