"""A small payment API on idem_keys: POST /payments charges a card at most once per Idempotency-Key, however
often the client retries and even if this process dies half-way.

Settings come from the environment: LISTEN_ADDR, DATABASE_URL, DATABASE_TRANSACTION_POOLER=1 (behind PgBouncer's
transaction pooling), PROVIDER_URL, IDEM_LEASE (a PostgreSQL interval), IDEM_RECONCILE_EVERY (seconds, 0 = off) and
IDEM_TEST_HOOKS=1 (crash hooks for the e2e harness).
"""
import json
import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import waitress
from flask import Flask, g, request
from psycopg_pool import ConnectionPool

from idempotency import Store, error, idempotent

log = logging.getLogger("payments")
PROVIDER_URL = os.environ.get("PROVIDER_URL", "http://127.0.0.1:8090")
TEST_HOOKS = os.environ.get("IDEM_TEST_HOOKS") == "1"

# Behind PgBouncer in transaction pooling mode (DATABASE_TRANSACTION_POOLER=1), consecutive statements of one
# connection may run on different server connections, and a server connection serves many clients: psycopg
# must not prepare named statements there (`prepared statement "_pg3_0" already exists`, docs/operations.md).
connection_options = {"autocommit": True}
if os.environ.get("DATABASE_TRANSACTION_POOLER") == "1":
    connection_options["prepare_threshold"] = None
pool = ConnectionPool(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:25329/postgres"),
                      min_size=2, max_size=16, kwargs=connection_options, open=True)
store = Store(pool, scope="payments", lease=os.environ.get("IDEM_LEASE", "30s"))
app = Flask(__name__)


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


def lookup_charge(reference):
    """The charge made under reference, or None."""
    try:
        return provider_call("GET", "/charges?" + urllib.parse.urlencode({"reference": reference}))
    except ProviderRefused as e:
        if e.status == 404:
            return None
        raise


def payment_answer(charge):
    """The answer to a successful payment, built from the provider's charge alone so the reconciler, which
    never saw the request, gives the same answer the view would have."""
    body = {"charge_id": charge["id"], "amount": charge["amount"], "currency": charge["currency"],
            "customer_id": charge["customer_id"], "status": "succeeded"}
    return body, 201, {"Location": f"/payments/{charge['id']}"}


def crash_if(moment):
    """Lets the e2e harness kill the service at the worst moments, e.g. after the provider charged and before
    idem_finish. Only with IDEM_TEST_HOOKS=1."""
    if TEST_HOOKS and request.headers.get("X-Test-Crash") == moment:
        os.kill(os.getpid(), signal.SIGKILL)


@app.post("/payments")
@idempotent(store)
def create_payment():
    pay = json.loads(request.get_data())  # whatever the Content-Type: the decorator checked it is JSON
    if not (isinstance(pay, dict) and isinstance(pay.get("amount"), int) and pay["amount"] > 0
            and isinstance(pay.get("currency"), str) and len(pay["currency"]) == 3 and pay.get("customer_id")):
        return error(400, "amount (> 0), currency (3 letters) and customer_id are required")
    key = request.headers["Idempotency-Key"]
    try:
        charge = None
        if g.idem_claim.outcome == "recovered":
            # The previous owner died somewhere between its claim and its finish: it may have charged already.
            charge = lookup_charge(key)
        if charge is None:
            crash_if("before-charge")
            charge = provider_call("POST", "/charges", {"reference": key, "amount": pay["amount"],
                                                        "currency": pay["currency"],
                                                        "customer_id": pay["customer_id"]})
            crash_if("after-charge")
    except ProviderRefused as e:
        if e.status == 402:
            return error(402, "card_declined")  # final: stored and replayed
        if e.status in (429, 503):  # the provider promises it charged nothing
            return error(503, "payment provider unavailable, nothing charged", {"Retry-After": "1"})
        log.warning("provider %r: status %d", key, e.status)
        return error(502, "payment provider failed")
    except OSError as e:
        # Maybe charged, maybe not: a 502 leaves the claim to the next retry or the reconciler.
        log.warning("provider %r: %s", key, e)
        return error(502, "payment provider unreachable")
    return payment_answer(charge)


def reconcile():
    """Settles every key whose owner died without finishing: if the provider holds a charge under the key, finish
    it with the answer the owner would have given; if not, nothing was charged, so release it for the client's
    retry. It uses the dead owner's token, so a retry that recovers the key meanwhile wins and our finish is
    refused (55000), which is fine. Releasing is safe even if the "dead" owner was only slow and charges after
    we looked: its finish is then refused, its client retries, and the provider, idempotent by reference,
    returns that same charge."""
    finished = released = 0
    for key, token in store.stale():
        try:
            charge = lookup_charge(key)
            if charge is None:
                released += store.release(key, token)
                continue
            body, status, headers = payment_answer(charge)
            store.finish(key, token, status, json.dumps(body).encode(),
                         {"Content-Type": "application/json", **headers})
            finished += 1
        except Exception as e:  # one bad key must not stop the pass; the next pass retries it
            log.warning("reconcile %r: %s", key, e)
    return finished, released


def reconcile_loop(every):
    while True:
        time.sleep(every)
        try:
            finished, released = reconcile()
        except Exception as e:  # the database is away: try again next pass, never let the thread die
            log.warning("reconcile: %s", e)
            continue
        if finished or released:
            log.info("reconcile: %d finished, %d released", finished, released)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # a burst of duplicates queues by design
    every = float(os.environ.get("IDEM_RECONCILE_EVERY", "30"))
    if every > 0:
        threading.Thread(target=reconcile_loop, args=(every,), daemon=True).start()
    listen = os.environ.get("LISTEN_ADDR", "127.0.0.1:8082")
    log.info("payments (python) listening on %s", listen)
    # waitress: a production WSGI server; 16 threads so a burst of duplicates does not queue behind each other.
    waitress.serve(app, listen=listen, threads=16, ident="payments")
