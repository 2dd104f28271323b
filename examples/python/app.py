"""A small payment API on idem_keys: POST /payments charges a card at most once per Idempotency-Key, however
often the client retries and even if this process dies half-way. Starlette behind idem-keys-asgi
(packages/idem-keys-asgi), served by uvicorn.

Settings come from the environment: LISTEN_ADDR, DATABASE_URL, DATABASE_TRANSACTION_POOLER=1 (behind PgBouncer's
transaction pooling), PROVIDER_URL, IDEM_LEASE (seconds; a trailing "s" is allowed, as in "30s"), IDEM_RECONCILE_EVERY (seconds, 0 = off) and
IDEM_TEST_HOOKS=1 (crash hooks for the e2e harness).
"""
import asyncio
import contextlib
import json
import logging
import os
import signal
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psycopg
import uvicorn
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from idem_keys_asgi import IdempotencyMiddleware

log = logging.getLogger("payments")
PROVIDER_URL = os.environ.get("PROVIDER_URL", "http://127.0.0.1:8090")
TEST_HOOKS = os.environ.get("IDEM_TEST_HOOKS") == "1"
# One tenant: every key lives in this scope. A service with several tenants returns the authenticated tenant's
# scope instead (docs/integrations.md, "The scope").
SCOPE = "payments"

# Autocommit: two-step mode, where the claim must commit before the provider is called, and the answer after.
# Behind PgBouncer in transaction pooling mode (DATABASE_TRANSACTION_POOLER=1), consecutive statements of one
# connection may run on different server connections, and a server connection serves many clients: psycopg
# must not prepare named statements there (`prepared statement "_pg3_0" already exists`, docs/operations.md).
connection_options = {"autocommit": True}
if os.environ.get("DATABASE_TRANSACTION_POOLER") == "1":
    connection_options["prepare_threshold"] = None
# timeout: a request waits at most 5 s for a connection, then gets 503 (store-unavailable) and retries.
pool = AsyncConnectionPool(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:25329/postgres"),
                           min_size=2, max_size=16, timeout=5, kwargs=connection_options, open=False)
# The provider client is urllib's, which blocks: it runs on these threads, so a slow provider never stalls the
# event loop (16, as many as the database connections, so a burst of payments does not queue here first).
provider_threads = ThreadPoolExecutor(16, thread_name_prefix="provider")


class ProviderRefused(Exception):
    """The provider answered 4xx/5xx without charging; status says which."""

    def __init__(self, status):
        super().__init__(f"provider status {status}")
        self.status = status


def provider_call(method, path, payload=None):
    """The provider's HTTP API. The idempotency key is our reference there, so a charge can always be found
    again, by a retry that recovers the key or by the reconciler."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(PROVIDER_URL + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        raise ProviderRefused(e.code) from None


async def provider(method, path, payload=None):
    return await asyncio.get_running_loop().run_in_executor(provider_threads, provider_call, method, path, payload)


async def lookup_charge(reference):
    """The charge made under reference, or None."""
    try:
        return await provider("GET", "/charges?" + urllib.parse.urlencode({"reference": reference}))
    except ProviderRefused as e:
        if e.status == 404:
            return None
        raise


def payment_answer(charge):
    """The answer to a successful payment, built from the provider's charge alone so the reconciler, which
    never saw the request, stores the very bytes the view would have sent."""
    body = {"charge_id": charge["id"], "amount": charge["amount"], "currency": charge["currency"],
            "customer_id": charge["customer_id"], "status": "succeeded"}
    return json.dumps(body).encode(), 201, {"Content-Type": "application/json",
                                            "Location": f"/payments/{charge['id']}"}


def error(status, message, headers=None):
    return JSONResponse({"error": message}, status, headers=headers)


def crash_if(request, moment):
    """Lets the e2e harness kill the service at the worst moments, e.g. after the provider charged and before
    idem_finish. Only with IDEM_TEST_HOOKS=1."""
    if TEST_HOOKS and request.headers.get("X-Test-Crash") == moment:
        os.kill(os.getpid(), signal.SIGKILL)


async def create_payment(request):
    """Runs under the middleware's claim: the answer is stored before the client sees it and replayed to every
    retry; 429 and 503 release the key (nothing was charged); an exception releases it too."""
    attempt = request.state.idempotency
    try:
        pay = json.loads(await request.body())
    except ValueError:
        pay = None
    if not (isinstance(pay, dict) and isinstance(pay.get("amount"), int) and pay["amount"] > 0
            and isinstance(pay.get("currency"), str) and len(pay["currency"]) == 3 and pay.get("customer_id")):
        return error(400, "a JSON body with amount (> 0), currency (3 letters) and customer_id is required")
    try:
        charge = None
        if attempt.recovered:
            # The previous owner died somewhere between its claim and its finish: it may have charged already.
            charge = await lookup_charge(attempt.key)
        if charge is None:
            crash_if(request, "before-charge")
            charge = await provider("POST", "/charges", {"reference": attempt.key, "amount": pay["amount"],
                                                         "currency": pay["currency"],
                                                         "customer_id": pay["customer_id"]})
            crash_if(request, "after-charge")
    except ProviderRefused as e:
        if e.status == 402:
            return error(402, "card_declined")  # final: stored and replayed
        if e.status in (429, 503):  # the provider promises it charged nothing: 503 releases the key
            return error(503, "payment provider unavailable, nothing charged", {"Retry-After": "1"})
        # Maybe charged, maybe not: leave the claim to the next retry (recovered) or the reconciler.
        log.warning("provider %r: status %d", attempt.key, e.status)
        attempt.leave_unsettled()
        return error(502, "payment provider failed")
    except OSError as e:
        log.warning("provider %r: %s", attempt.key, e)
        attempt.leave_unsettled()
        return error(502, "payment provider unreachable")
    body, status, headers = payment_answer(charge)
    return Response(body, status, headers=headers)


async def reconcile():
    """Settles every key whose owner died without finishing: if the provider holds a charge under the key, finish
    it with the answer the owner would have given; if not, nothing was charged, so release it for the client's
    retry. It uses the dead owner's token, so a retry that recovers the key meanwhile wins and our finish is
    refused (55000), which is fine. Releasing is safe even if the "dead" owner was only slow and charges after
    we looked: its finish is then refused, its client retries, and the provider, idempotent by reference,
    returns that same charge."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT key, token FROM idem_stale() WHERE scope = %s", (SCOPE,))
        stale = await cur.fetchall()
    finished = released = 0
    for key, token in stale:
        try:
            charge = await lookup_charge(key)
            async with pool.connection() as conn:
                if charge is None:
                    cur = await conn.execute("SELECT idem_release(%s, %s, %s)", (SCOPE, key, token))
                    released += (await cur.fetchone())[0]
                    continue
                # The bytea overload, as the middleware stores it: replays repeat these bytes exactly.
                body, status, headers = payment_answer(charge)
                await conn.execute("SELECT idem_finish(%s, %s, %s, %s, %s::bytea, headers => %s::jsonb)",
                                   (SCOPE, key, token, status, body, json.dumps(headers)))
                finished += 1
        except psycopg.errors.ObjectNotInPrerequisiteState:
            pass  # a retry recovered the key meanwhile: its answer counts
        except Exception as e:  # one bad key must not stop the pass; the next pass retries it
            log.warning("reconcile %r: %s", key, e)
    return finished, released


async def reconcile_loop(every):
    while True:
        await asyncio.sleep(every)
        try:
            finished, released = await reconcile()
        except Exception as e:  # the database is away: try again next pass, never let the task die
            log.warning("reconcile: %s", e)
            continue
        if finished or released:
            log.info("reconcile: %d finished, %d released", finished, released)


@contextlib.asynccontextmanager
async def lifespan(app):
    # Without waiting: the service starts even while the database is away, answering 503 until it is back.
    await pool.open()
    every = float(os.environ.get("IDEM_RECONCILE_EVERY", "30"))
    reconciler = asyncio.create_task(reconcile_loop(every)) if every > 0 else None
    try:
        yield
    finally:
        if reconciler:
            reconciler.cancel()
        await pool.close()


app = Starlette(
    routes=[Route("/payments", create_payment, methods=["POST"])],
    middleware=[Middleware(IdempotencyMiddleware, pool=pool, scope=lambda _: SCOPE,
                           lease=float(os.environ.get("IDEM_LEASE", "30").removesuffix("s")), outcome_header="Idempotency-Outcome")],
    lifespan=lifespan)

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    host, _, port = os.environ.get("LISTEN_ADDR", "127.0.0.1:8082").rpartition(":")
    log.info("payments (python) listening on %s:%s", host, port)
    # One process, one event loop: requests wait on the provider and the database, not on the CPU. A short
    # graceful shutdown, so a SIGTERM does not wait out a slow provider.
    uvicorn.run(app, host=host or "127.0.0.1", port=int(port), access_log=False, timeout_graceful_shutdown=3,
                log_config=None)
