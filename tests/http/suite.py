"""The HTTP behaviour suite: every rule of docs/integrations.md, checked the same way against the sample payments
app built on each middleware (tests/http/README.md). Standard library only; loopback only; every wait bounded.

    python3 tests/http/suite.py --database-url URL --workdir DIR --port PORT go [python] [node] [rails] [django] [rack]
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from harness import Process  # noqa: E402  (the e2e suite's child-process plumbing)
from pgproxy import Proxy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
LOST_COMMIT_MARKER = "cus_commit_lost"  # pgproxy.py drops the answer to the COMMIT of a transaction that sent it
LEASE = 4.0  # seconds: IDEM_LEASE of the app under test; every lease-driven check waits just past it
PAY = {"amount": 1000, "currency": "EUR", "customer_id": "cus_1"}
# The problems every middleware answers, their statuses, titles, details and exact bytes: the one contract all five
# packages' tests load (contract/problems.json, docs/integrations.md's problem table).
CONTRACT = json.loads((REPO / "contract/problems.json").read_text())["problems"]
PROBLEM_TITLES = {p["status"]: p["title"] for p in CONTRACT}
PROBLEM_DETAILS = {p["code"]: p["detail"] for p in CONTRACT}
PROBLEM_BODIES = {p["code"]: p["body"].encode() for p in CONTRACT}
# Plain ASCII without < > &, which Go's encoding/json would escape and the others would not.
assert all(d.isascii() and not set(d) & set("<>&") for d in PROBLEM_DETAILS.values()), "see the comment above"


@dataclass
class Reply:
    status: int
    headers: dict  # lower-case names; several fields of one name joined with ", "
    raw: bytes

    def json(self):
        return json.loads(self.raw)

    def header(self, name):
        return self.headers.get(name.lower())

    @property
    def replayed(self):
        return self.header("Idempotent-Replayed") == "true"

    @property
    def outcome(self):
        return self.header("Idempotency-Outcome")


def send(port, method, path, body=b"", headers=(), timeout=10.0):
    """One request on a fresh connection; headers is a list of (name, value) so a name may repeat."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if body or method in ("POST", "PATCH"):
            conn.putheader("Content-Length", str(len(body)))
        try:
            conn.endheaders(body or None)
        except (BrokenPipeError, ConnectionResetError):
            # A server may answer (413, say) and close before it has read the whole body; like curl and the
            # browsers, read the answer it sent rather than report the refused upload.
            pass
        resp = conn.getresponse()
        raw = resp.read()
        merged = {}
        for name, value in resp.getheaders():
            merged[name.lower()] = f"{merged[name.lower()]}, {value}" if name.lower() in merged else value
        return Reply(resp.status, merged, raw)
    finally:
        conn.close()


class Failed(Exception):
    pass


def expect(condition, message):
    if not condition:
        raise Failed(message)


def show(reply):
    return f"{reply.status} {reply.raw[:200]!r}"


def expect_problem(reply, status, code):
    expect(reply.status == status, f"expected {status} {code}, got {show(reply)}")
    expect(reply.header("Content-Type", ).split(";")[0].strip() == "application/problem+json",
           f"{code}: Content-Type is {reply.header('Content-Type')!r}, not application/problem+json")
    body = reply.json()
    expect(list(body) == ["type", "title", "status", "detail", "code"], f"{code}: problem fields {list(body)}")
    expect(body["type"] == "about:blank" and body["status"] == status and body["code"] == code,
           f"{code}: problem {body}")
    expect(body["title"] == PROBLEM_TITLES[status], f"{code}: title {body['title']!r}")
    expect(body["detail"] == PROBLEM_DETAILS[code], f"{code}: detail {body['detail']!r}")
    expect(reply.raw == PROBLEM_BODIES[code], f"{code}: the body is not the shared compact JSON: {reply.raw!r}")


class App:
    """One sample app (tests/http/serve.sh LANG PORT), restartable, with its payments table read through psql."""

    def __init__(self, lang, port, database_url, workdir, app_database_url=None, **env):
        """database_url is where the suite reads the payments; the app connects to app_database_url (default the
        same; the suite's proxy in front of it, for the lost COMMIT)."""
        self.lang, self.port, self.database_url = lang, port, database_url
        # IDEM_TX=1: the middleware's transactional mode (the handler's writes in the key's own transaction)
        self.tx = env.get("IDEM_TX") == "1"
        self.process = Process(f"http-{lang}-{port}", ["bash", str(REPO / "tests/http/serve.sh"), lang, str(port)],
                               {"DATABASE_URL": app_database_url or database_url, "IDEM_LEASE": f"{LEASE:g}", **env},
                               workdir)

    def start(self):
        self.process.start()
        self.process.wait_listening(self.port, timeout=30)

    def kill(self):
        self.process.popen.send_signal(signal.SIGKILL)
        self.process.popen.wait(5)
        # A server's workers can outlive their master for a moment (gunicorn's die by the parent-death signal) and
        # still hold the listening socket: until they are gone, the restarted app's readiness probe would reach them.
        expect(wait_for(lambda: not accepting(self.port), "the killed app's port closing"),
               f"port {self.port} still accepts connections 10 s after the app's SIGKILL")

    def stop(self):
        self.process.stop()

    def post(self, key, body=PAY, tenant="acme", path="/payments", content_type="application/json", extra=(),
             timeout=10.0):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = [("Content-Type", content_type)]
        if tenant is not None:
            headers.append(("Authorization", f"Bearer {tenant}"))
        if key is not None:
            headers.append(("Idempotency-Key", key))
        return send(self.port, "POST", path, raw, headers + list(extra), timeout)

    def get(self, path, tenant, extra=()):
        return send(self.port, "GET", path, b"", [("Authorization", f"Bearer {tenant}"), *extra])

    def sql(self, query, **values):
        args = ["psql", self.database_url, "-XqtA", "-v", "ON_ERROR_STOP=1"]
        for name, value in values.items():
            args += ["-v", f"{name}={value}"]
        out = subprocess.run(args, input=query + "\n", capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip()

    def payments(self, tenant, key=None):
        if key is None:
            return int(self.sql("SELECT count(*) FROM payments WHERE tenant = :'t'", t=tenant))
        return int(self.sql("SELECT count(*) FROM payments WHERE tenant = :'t' AND idempotency_key = :'k'",
                            t=tenant, k=key))


def later(fn, *args, **kwargs):
    """Runs fn in a thread; .result() waits for it (bounded by the request's own timeout)."""
    box = {}

    def run():
        try:
            box["reply"] = fn(*args, **kwargs)
        except Exception as e:  # surfaced by result()
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    class Pending:
        @staticmethod
        def done():
            return not thread.is_alive()

        @staticmethod
        def result():
            thread.join(60)
            if "error" in box:
                raise box["error"]
            expect("reply" in box, "a request did not end within 60 s")
            return box["reply"]
    return Pending


def accepting(port):
    """Whether something accepts connections on the port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def wait_for(condition, what, seconds=10.0):
    """Polls condition() every 50 ms until it holds (True) or seconds pass (False)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.05)
    return False


def fresh(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---- the checks: each gets the running app, raises Failed with what it saw -----------------------------------

def check_key_missing(app):
    tenant = fresh("t")
    expect_problem(app.post(None, tenant=tenant), 400, "key-missing")
    expect(app.payments(tenant) == 0, "a request without a key reached the handler")


def check_key_malformed(app):
    tenant = fresh("t")
    bad = ['"unclosed', "two words", "k" * 256, '""', "", '"a\\qb"', '"ab"c', '"abc";p=1', "caf\xe9", 'ab"c',
           "back\\slash", '"' + "k" * 256 + '"']
    for value in bad:
        reply = app.post(value, tenant=tenant)
        expect(reply.status == 400, f"key {value[:40]!r}: {show(reply)}")
        expect_problem(reply, 400, "key-malformed")
    reply = send(app.port, "POST", "/payments", json.dumps(PAY).encode(),
                 [("Content-Type", "application/json"), ("Authorization", f"Bearer {tenant}"),
                  ("Idempotency-Key", "one"), ("Idempotency-Key", "two")])
    expect_problem(reply, 400, "key-malformed")
    expect(app.payments(tenant) == 0, "a malformed key reached the handler")


def check_body_too_large(app):
    """The middleware holds the body in memory to fingerprint it: past its limit (1 MiB by default), 413."""
    tenant, key = fresh("t"), fresh("k")
    padded = json.dumps({**PAY, "note": "x" * (1 << 20)}).encode()
    expect_problem(app.post(key, padded, tenant=tenant), 413, "body-too-large")
    expect(app.payments(tenant) == 0, "a body over the limit reached the handler")
    expect(app.post(key, tenant=tenant).status == 201, "the key was claimed by the refused request")


def check_key_forms(app):
    tenant = fresh("t")
    key = fresh("k")
    first = app.post(f'"{key}"', tenant=tenant)
    expect(first.status == 201 and not first.replayed, f"quoted key: {show(first)}")
    again = app.post(key, tenant=tenant)
    expect(again.status == 201 and again.replayed and again.raw == first.raw, f"the bare form of the same key: "
           f"{show(again)}")
    longest = "k" * 255
    expect(app.post(longest, tenant=tenant).status == 201, "a 255-character key is refused")
    spaced = app.post('"two words \\"quoted\\" and \\\\"', tenant=tenant)
    expect(spaced.status == 201, f"a quoted key with a space and escapes: {show(spaced)}")
    expect(app.payments(tenant) == 3, f"payments: {app.payments(tenant)}, expected 3")


def check_replay_byte_for_byte(app):
    tenant, key = fresh("t"), fresh("k")
    first = app.post(key, tenant=tenant)
    expect(first.status == 201, f"first: {show(first)}")
    expect(first.header("Idempotent-Replayed") is None, "the first answer says it is a replay")
    expect(first.header("X-Request-Id"), "the sample app's X-Request-Id is missing")
    expect(first.json()["attempt"] == "claimed", f"attempt: {first.json()}")
    for _ in range(2):
        again = app.post(key, tenant=tenant)
        expect(again.status == 201 and again.replayed, f"retry: {show(again)}")
        expect(again.raw == first.raw, f"replayed body differs: {again.raw!r} vs {first.raw!r}")
        for name in ("Location", "Content-Type"):
            expect(again.header(name) == first.header(name), f"{name}: {again.header(name)!r}, first "
                   f"{first.header(name)!r}")
        expect(again.header("X-Request-Id") is None, "a header off the allow-list was replayed")
    expect(app.payments(tenant, key) == 1, "the replays charged again")


def check_canonical_json(app):
    tenant, key = fresh("t"), fresh("k")
    first = app.post(key, b'{"amount": 1000, "currency": "EUR", "customer_id": "cus_1"}', tenant=tenant)
    reordered = app.post(key, b'{ "customer_id":"cus_1",\n  "currency":"EUR","amount":1000 }', tenant=tenant)
    expect(reordered.status == 201 and reordered.replayed and reordered.raw == first.raw,
           f"the same JSON with other key order and spacing: {show(reordered)}")
    expect(app.payments(tenant, key) == 1, "charged twice")


def check_key_reused(app):
    tenant, key = fresh("t"), fresh("k")
    expect(app.post(key, tenant=tenant).status == 201, "first")
    expect_problem(app.post(key, {**PAY, "amount": 2000}, tenant=tenant), 422, "key-reused")
    expect_problem(app.post(key, tenant=tenant, path="/payments?expand=customer"), 422, "key-reused")
    patched = send(app.port, "PATCH", "/payments", json.dumps(PAY).encode(),
                   [("Content-Type", "application/json"), ("Authorization", f"Bearer {tenant}"),
                    ("Idempotency-Key", key)])
    expect_problem(patched, 422, "key-reused")  # the method is part of the request too
    expect_problem(app.post(key, json.dumps(PAY).encode(), tenant=tenant, content_type="text/plain"), 422,
                   "key-reused")
    expect(app.payments(tenant, key) == 1, "a reused key reached the handler")


def check_bytes_fingerprint(app):
    """A body that is not JSON by its Content-Type counts by its bytes."""
    tenant, key = fresh("t"), fresh("k")
    body = b'{"amount": 1000, "currency": "EUR", "customer_id": "cus_1"}'
    first = app.post(key, body, tenant=tenant, content_type="text/plain")
    again = app.post(key, body, tenant=tenant, content_type="text/plain")
    expect(again.replayed and again.status == first.status and again.raw == first.raw,
           f"the same bytes: {show(again)} after {show(first)}")
    respaced = app.post(key, body.replace(b": ", b":"), tenant=tenant, content_type="text/plain")
    expect_problem(respaced, 422, "key-reused")


def check_in_progress(app):
    tenant, key = fresh("t"), fresh("k")
    slow = {**PAY, "customer_id": "cus_slow_1500"}
    pending = later(app.post, key, slow, tenant=tenant)
    time.sleep(0.4)
    busy = app.post(key, slow, tenant=tenant)
    expect_problem(busy, 409, "request-in-progress")
    retry_after = busy.header("Retry-After")
    expect(retry_after is not None and retry_after.isdigit() and int(retry_after) >= 1,
           f"Retry-After: {retry_after!r}")
    first = pending.result()
    expect(first.status == 201 and first.outcome == "claimed", f"the first attempt: {show(first)}")
    after = app.post(key, slow, tenant=tenant)
    expect(after.replayed and after.raw == first.raw, f"after it ended: {show(after)}")
    expect(app.payments(tenant, key) == 1, "charged twice")


def check_retryable_releases(app):
    tenant, key = fresh("t"), fresh("k")
    refused = app.post(key, {**PAY, "customer_id": "cus_fail_503"}, tenant=tenant)
    expect(refused.status == 503 and not refused.replayed, f"cus_fail_503: {show(refused)}")
    expect(refused.header("Retry-After") == "1", "the app's own Retry-After is lost")
    # Released: the key is free again, even for another body.
    ok = app.post(key, tenant=tenant)
    expect(ok.status == 201 and ok.outcome == "claimed", f"after a 503 the key is not free: {show(ok)}")
    expect(app.payments(tenant, key) == 1, "payments")


def check_error_answers_stored(app):
    tenant = fresh("t")
    for body, status in (({**PAY, "customer_id": "cus_fail_402"}, 402), ({**PAY, "amount": -5}, 400)):
        key = fresh("k")
        first = app.post(key, body, tenant=tenant)
        expect(first.status == status and not first.replayed, f"{body}: {show(first)}")
        again = app.post(key, body, tenant=tenant)
        expect(again.status == status and again.replayed and again.raw == first.raw,
               f"the {status} is not replayed: {show(again)}")
        expect(again.header("Content-Type") == first.header("Content-Type"), "Content-Type not replayed")
    expect(app.payments(tenant) == 0, "payments")


def check_throw_releases(app):
    tenant, key = fresh("t"), fresh("k")
    thrown = app.post(key, {**PAY, "customer_id": "cus_throw"}, tenant=tenant)
    expect(thrown.status == 500 and not thrown.replayed, f"cus_throw: {show(thrown)}")
    again = app.post(key, {**PAY, "customer_id": "cus_throw"}, tenant=tenant)
    expect(again.status == 500 and again.outcome == "claimed", f"after a throw the key is not free: {show(again)}")
    ok = app.post(key, tenant=tenant)
    expect(ok.status == 201 and ok.outcome == "claimed", f"another body after a throw: {show(ok)}")


def check_unsettled(app):
    tenant, key = fresh("t"), fresh("k")
    body = {**PAY, "customer_id": "cus_unsettled"}
    first = app.post(key, body, tenant=tenant)
    expect(first.status == 502 and first.outcome == "claimed", f"cus_unsettled: {show(first)}")
    expect_problem(app.post(key, body, tenant=tenant), 409, "request-in-progress")
    time.sleep(LEASE + 0.3)
    recovered = app.post(key, body, tenant=tenant)
    expect(recovered.status == 502 and recovered.outcome == "recovered",
           f"after the lease the key is not recovered: {show(recovered)} {recovered.outcome}")


def check_lease_lost(app):
    """A handler that outlives its lease: the request that took over answers, the late one is fenced off. In the
    transactional mode nobody can take over a claim whose transaction is open: the late handler's answer counts."""
    tenant, key = fresh("t"), fresh("k")
    slow = {**PAY, "customer_id": "cus_slow_5500"}
    late = later(app.post, key, slow, tenant=tenant)
    time.sleep(LEASE + 0.5)
    if app.tx:
        expect_problem(app.post(key, slow, tenant=tenant), 409, "request-in-progress")
        first = late.result()
        expect(first.status == 201 and first.outcome == "claimed", f"the slow handler: {show(first)}")
        replay = app.post(key, slow, tenant=tenant)
        expect(replay.replayed and replay.raw == first.raw, f"the replay is not its answer: {show(replay)}")
        expect(app.payments(tenant, key) == 1, f"payments: {app.payments(tenant, key)}")
        return
    taker = later(app.post, key, slow, tenant=tenant)
    late_reply = late.result()
    expect_problem(late_reply, 409, "lease-lost")
    expect(late_reply.header("Retry-After") == "1", f"lease-lost Retry-After: {late_reply.header('Retry-After')}")
    taken = taker.result()
    expect(taken.status == 201 and taken.json()["attempt"] == "recovered", f"the request that took over: "
           f"{show(taken)}")
    replay = app.post(key, slow, tenant=tenant, timeout=15)
    expect(replay.replayed and replay.raw == taken.raw, f"the replay is not the new owner's answer: {show(replay)}")
    # The late handler's row came first; the owner that took over found it as a recovered attempt must.
    expect(app.payments(tenant, key) == 1, f"payments: {app.payments(tenant, key)}")


def check_sigkill_recovery(app):
    tenant, key = fresh("t"), fresh("k")
    slow = {**PAY, "customer_id": "cus_slow_2000"}
    pending = later(app.post, key, slow, tenant=tenant)
    time.sleep(0.5)
    app.kill()
    try:
        pending.result()
        raise Failed("the killed app answered")
    except (ConnectionError, http.client.HTTPException):
        pass  # the client saw the connection die: it will retry
    app.start()
    if app.tx:
        # The dead app's transaction rolled back with its connection: the key is free at once.
        retried = app.post(key, slow, tenant=tenant)
        expect(retried.status == 201 and retried.outcome == "claimed", f"after the crash: {show(retried)}")
        expect(app.payments(tenant, key) == 1, f"payments: {app.payments(tenant, key)}")
        return
    expect_problem(app.post(key, slow, tenant=tenant), 409, "request-in-progress")
    time.sleep(LEASE)
    recovered = app.post(key, slow, tenant=tenant)
    expect(recovered.status == 201 and recovered.outcome == "recovered" and recovered.json()["attempt"] == "recovered",
           f"after the crash: {show(recovered)}")
    again = app.post(key, slow, tenant=tenant)
    expect(again.replayed and again.raw == recovered.raw, f"replay after recovery: {show(again)}")
    expect(app.payments(tenant, key) == 1, f"payments: {app.payments(tenant, key)}")


def check_crash_after_write(app):
    """SIGKILL after the handler wrote its payment, before it answered. Transactional: the write died with the
    transaction, and the first retry runs at once and pays once. Default: the payment stays, the key stays claimed
    until its lease ends (409), then the retry is recovered and finds the payment (one payment)."""
    tenant, key = fresh("t"), fresh("k")
    body = {**PAY, "customer_id": "cus_crash_after_write_3000"}
    pending = later(app.post, key, body, tenant=tenant)
    written = wait_for(lambda: app.tx or app.payments(tenant, key) == 1, "the default mode's write")
    time.sleep(0.8 if app.tx else 0)  # the transactional write cannot be seen: give the handler time to make it
    expect(written, "the payment was not written")
    app.kill()
    try:
        pending.result()
        raise Failed("the killed app answered")
    except (ConnectionError, http.client.HTTPException):
        pass
    app.start()
    if app.tx:
        expect(app.payments(tenant, key) == 0, "the killed transaction's payment was committed")
        again = app.post(key, body, tenant=tenant, timeout=15)
        expect(again.status == 201 and again.outcome == "claimed" and again.json()["attempt"] == "claimed",
               f"the first retry after the crash: {show(again)}")
    else:
        expect(app.payments(tenant, key) == 1, "the default mode's payment is gone")
        expect_problem(app.post(key, body, tenant=tenant), 409, "request-in-progress")
        time.sleep(LEASE)
        again = app.post(key, body, tenant=tenant, timeout=15)
        expect(again.status == 201 and again.outcome == "recovered", f"after the lease: {show(again)}")
    expect(app.payments(tenant, key) == 1, f"payments: {app.payments(tenant, key)}")
    replay = app.post(key, body, tenant=tenant)
    expect(replay.replayed and replay.raw == again.raw, f"replay: {show(replay)}")


def check_throw_after_write(app):
    """A handler that wrote and then threw: the key is free either way; transactional, its write is gone too."""
    tenant, key = fresh("t"), fresh("k")
    thrown = app.post(key, {**PAY, "customer_id": "cus_throw_after_write"}, tenant=tenant)
    expect(thrown.status == 500 and not thrown.replayed, f"cus_throw_after_write: {show(thrown)}")
    expect(app.payments(tenant, key) == (0 if app.tx else 1), f"payments after the throw: {app.payments(tenant, key)}")
    ok = app.post(key, tenant=tenant)
    expect(ok.status == 201 and ok.outcome == "claimed", f"after the throw the key is not free: {show(ok)}")


def check_commit_fails(app):
    """Transactional: a COMMIT that fails (a deferred constraint here; a serialization failure or a lost
    connection alike) answers 503 commit-failed, and neither the payment nor the answer is stored."""
    tenant, key = fresh("t"), fresh("k")
    failed = app.post(key, {**PAY, "customer_id": "cus_commit_fails"}, tenant=tenant)
    expect_problem(failed, 503, "commit-failed")
    expect(failed.header("Retry-After") == "1", f"Retry-After: {failed.header('Retry-After')!r}")
    expect(app.payments(tenant, key) == 0, "the failed commit's payment is there")
    stored = app.sql("SELECT count(*) FROM idem_lookup(:'t', :'k') WHERE outcome IS NOT NULL", t=tenant, k=key)
    expect(stored == "0", f"the failed commit left the key: {stored}")
    ok = app.post(key, tenant=tenant)
    expect(ok.status == 201 and ok.outcome == "claimed", f"after the failed commit: {show(ok)}")


def check_commit_lost(app):
    """Transactional: the COMMIT reached the server and committed, and its answer was lost with the connection (the
    suite's proxy drops it, pgproxy.py). The middleware cannot know the outcome and says so: 503 commit-unknown, not
    "nothing was done". A retry with the same key resolves it: the claim, the answer and the payment committed
    together, so it is the replay of the committed answer (had the COMMIT not happened, the retry would run anew)."""
    tenant, key = fresh("t"), fresh("k")
    body = {**PAY, "customer_id": LOST_COMMIT_MARKER}
    lost = app.post(key, body, tenant=tenant)
    expect_problem(lost, 503, "commit-unknown")
    expect(lost.header("Retry-After") == "1", f"Retry-After: {lost.header('Retry-After')!r}")
    expect(app.payments(tenant, key) == 1, "the COMMIT whose answer was lost did not commit the payment")
    replay = app.post(key, body, tenant=tenant)
    expect(replay.status == 201 and replay.replayed, f"the retry after the lost COMMIT: {show(replay)}")
    expect(app.payments(tenant, key) == 1, f"payments: {app.payments(tenant, key)}")
    after = app.post(fresh("k"), tenant=tenant)  # the connection the COMMIT was lost on is not handed out again
    expect(after.status == 201 and not after.replayed, f"a new key after the lost COMMIT: {show(after)}")


def check_storm_one_key(app):
    """16 clients on one key at once, each retrying on 409: one payment, one answer, every client holding it."""
    tenant, key = fresh("t"), fresh("k")
    storm(app, tenant, [key], 16, {**PAY, "customer_id": "cus_slow_200"})


def check_scope_per_tenant(app):
    key = fresh("k")
    acme, globex = fresh("acme"), fresh("globex")
    a = app.post(key, tenant=acme)
    b = app.post(key, tenant=globex)
    expect(a.status == 201 and b.status == 201 and not b.replayed, f"another tenant's same key: {show(b)}")
    expect(a.json()["id"] != b.json()["id"], "two tenants got one payment")
    expect(app.post(key, tenant=acme).raw == a.raw and app.post(key, tenant=globex).raw == b.raw,
           "a tenant's replay is not its own answer")
    reused = app.post(key, {**PAY, "amount": 5}, tenant=globex)
    expect_problem(reused, 422, "key-reused")
    expect(app.post(key, tenant=None).status == 401, "no authentication must be the app's 401")
    expect(app.payments(acme, key) == 1 and app.payments(globex, key) == 1, "payments per tenant")


def check_other_methods_pass(app):
    tenant = fresh("t")
    made = app.post(fresh("k"), tenant=tenant)
    location = made.header("Location")
    seen = app.get(location, tenant, extra=[("Idempotency-Key", "not a valid key")])
    expect(seen.status == 200 and json.loads(seen.raw)["id"] == made.json()["id"], f"GET: {show(seen)}")
    expect(seen.header("Idempotent-Replayed") is None and seen.outcome is None, "the middleware touched a GET")
    expect(app.get(location, fresh("other")).status == 404, "another tenant read the payment")


def storm(app, tenant, keys, clients, body):
    """clients per key, all at once, each retrying on 409 until it holds an answer (bounded): every client gets the
    one answer of its key, exactly one of them not a replay, and each key makes one payment."""
    answers = {k: [] for k in keys}
    lock = threading.Lock()

    def client(key):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            reply = app.post(key, body, tenant=tenant, timeout=15)
            if reply.status == 409:
                time.sleep(0.05)
                continue
            with lock:
                answers[key].append(reply)
            return

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in keys for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    for key in keys:
        got = answers[key]
        expect(len(got) == clients, f"{key}: {len(got)} of {clients} clients got an answer")
        expect(all(r.status == 201 and r.raw == got[0].raw for r in got), f"{key}: answers differ")
        fresh_answers = sum(not r.replayed for r in got)
        expect(fresh_answers == 1, f"{key}: {fresh_answers} answers were not replays")
        expect(app.payments(tenant, key) == 1, f"{key}: {app.payments(tenant, key)} payments")


def check_retry_storm(app):
    """16 keys, 6 clients each, all at once, each retrying on 409 until it holds an answer: one payment per key,
    one answer per key, every client holding it."""
    storm(app, fresh("t"), [fresh("k") for _ in range(16)], 6, {**PAY, "customer_id": "cus_slow_150"})


def check_server_side_wait(app):
    """With IDEM_WAIT set, a duplicate waits for the first attempt and gets its answer instead of 409."""
    tenant, key = fresh("t"), fresh("k")
    slow = {**PAY, "customer_id": "cus_slow_1000"}
    pending = later(app.post, key, slow, tenant=tenant)
    time.sleep(0.3)
    waited = app.post(key, slow, tenant=tenant)
    first = pending.result()
    expect(waited.status == 201 and waited.replayed and waited.raw == first.raw,
           f"the duplicate did not wait for the answer: {show(waited)}")
    expect(app.payments(tenant, key) == 1, "payments")


def check_wait_bounded(app):
    """The server-side wait never outlasts IDEM_WAIT (2 s): a first attempt that runs longer leaves the duplicate
    a 409 while it still runs (transactional: without blocking on its open transaction)."""
    tenant, key = fresh("t"), fresh("k")
    slow = {**PAY, "customer_id": "cus_slow_4000"}
    pending = later(app.post, key, slow, tenant=tenant)
    time.sleep(0.3)
    waited = app.post(key, slow, tenant=tenant)
    expect_problem(waited, 409, "request-in-progress")
    expect(not pending.done(), "the duplicate waited for the first attempt to end, past its wait")
    first = pending.result()
    expect(first.status == 201 and not first.replayed, f"the first attempt: {show(first)}")
    expect(app.payments(tenant, key) == 1, "payments")


CHECKS = [check_key_missing, check_key_malformed, check_body_too_large, check_key_forms, check_replay_byte_for_byte,
          check_canonical_json, check_key_reused, check_bytes_fingerprint, check_in_progress,
          check_retryable_releases, check_error_answers_stored, check_throw_releases, check_scope_per_tenant,
          check_other_methods_pass, check_retry_storm, check_storm_one_key, check_throw_after_write, check_unsettled,
          check_lease_lost, check_sigkill_recovery, check_crash_after_write]
TX_CHECKS = [check_commit_fails, check_commit_lost]  # the transactional mode's own (in the default mode the app's write fails at once)
WAIT_CHECKS = [check_server_side_wait, check_wait_bounded]
MODES = (("default", {}), ("transactional", {"IDEM_TX": "1"}))


def run_checks(app, checks, results):
    for check in checks:
        name = check.__name__.removeprefix("check_")
        start = time.monotonic()
        try:
            check(app)
            results.append((app.label, name, "ok", f"{time.monotonic() - start:.1f} s"))
        except Exception as e:  # noqa: BLE001 — one broken check must not hide the others
            detail = str(e) if isinstance(e, Failed) else f"{type(e).__name__}: {e}"
            results.append((app.label, name, "FAILED", detail))
            print(f"-- {app.label} {name}: {detail}\n-- last lines of {app.process.log_path}:\n"
                  f"{app.process.log_tail()}", flush=True)
            if app.process.popen.poll() is not None:  # a check that killed it must not fail the rest
                app.start()


def run_all(args, app_database_url, results):
    modes = [(mode, env) for mode, env in MODES if mode in args.modes.split(",")]
    for lang in args.langs:
        for mode, mode_env in modes:
            tx_checks = TX_CHECKS if mode_env else []
            for checks, env in ((CHECKS + tx_checks, {}), (WAIT_CHECKS, {"IDEM_WAIT": "2"})):
                app = App(lang, args.port, args.database_url, args.workdir, app_database_url, **mode_env, **env)
                app.label = f"{lang} {mode}"
                try:
                    app.start()
                    run_checks(app, checks, results)
                finally:
                    app.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--port", type=int, required=True,
                        help="the apps listen on this port; the proxy in front of the database on the next")
    parser.add_argument("--label", default="", help="printed with the results (which database)")
    parser.add_argument("--modes", default="default,transactional",
                        help="the middleware's modes to check each app in (comma-separated)")
    parser.add_argument("langs", nargs="+", metavar="app", help="go, python, node, django, rails or rack, each with "
                        "@STACK for another stack than the host's (tests/http/serve.sh)")
    args = parser.parse_args()
    unknown = set(args.modes.split(",")) - {mode for mode, _ in MODES}
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the apps
    # The apps reach the database through the proxy that can lose a COMMIT's answer (check_commit_lost); the suite
    # reads the payments directly.
    url = urllib.parse.urlsplit(args.database_url)
    proxy = Proxy(args.port + 1, url.port, LOST_COMMIT_MARKER.encode())
    proxied_url = url._replace(netloc=f"{url.username}@127.0.0.1:{args.port + 1}").geturl()
    results = []
    try:
        run_all(args, proxied_url, results)
    finally:
        proxy.stop()
    width = max(len(r[1]) for r in results)
    print(f"\nHTTP suite{' ' + args.label if args.label else ''}:")
    for label, name, verdict, detail in results:
        print(f"  {label:<20} {name:<{width}}  {verdict:<6} {detail}")
    failed = sum(r[2] != "ok" for r in results)
    print(f"http: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
