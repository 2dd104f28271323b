#!/usr/bin/env python3
"""The e2e attack: each payment service (examples/go, examples/python, examples/node) gets the same scenarios,
against one fake provider (examples/provider) and one PostgreSQL with idem_keys. Prints a table per service and
a closing 'N passed, N failed' line; exits 1 if any check failed. run.sh provides the database; this script
starts and kills the provider and the services. Loopback only; every loop is bounded."""
import argparse
import http.client
import json
import random
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import Process, Provider, Reply, lookup, pay, pay_until_answered

REPO = Path(__file__).resolve().parents[2]
SERVICES = {
    "go": [str(REPO / "examples/go/bin/payments")],
    "python": [str(REPO / "examples/python/.venv/bin/python"), str(REPO / "examples/python/app.py")],
    "node": ["node", str(REPO / "examples/node/server.js")],
}
LEASE = "10s"  # far longer than any request here takes, so only a dead owner's key is ever recovered
SHORT_LEASE = "2s"  # the dead inverters' claims: their retries recover the key two seconds later
SCOPE = "payments"  # the scope the three services claim in
BODY = {"amount": 1000, "currency": "EUR", "customer_id": "cus_1"}


class Scenario:
    def __init__(self, name):
        self.name, self.failures, self.notes = name, [], []

    def expect(self, condition, failure):
        if not condition:
            self.failures.append(failure)

    def note(self, text):
        self.notes.append(text)


class Run:
    """One service under attack, and what it needs to restart it."""

    def __init__(self, name, port, service, provider, database_url):
        self.name, self.port, self.service, self.provider = name, port, service, provider
        self.database_url = database_url
        self.prefix = f"{name}-{secrets.token_hex(3)}-"

    def key(self, label):
        return self.prefix + label

    def restart(self, lease=LEASE, reconcile_every="0"):
        self.service.stop()
        self.service.start(IDEM_LEASE=lease, IDEM_RECONCILE_EVERY=reconcile_every)
        self.service.wait_listening(self.port)

    def charge_of(self, key):
        return self.provider.stats(reference=key)


def charge_id(reply):
    return reply.body.get("charge_id") if isinstance(reply, Reply) and isinstance(reply.body, dict) else None


def dead_inverters(run, sc):
    """SIGKILL after the provider charged (twice) and before it did (once), before any idem_finish."""
    crashed = {"retry": (run.key("dead-retry"), "after-charge"),
               "reconciled": (run.key("dead-reconciled"), "after-charge"),
               "uncharged": (run.key("dead-uncharged"), "before-charge")}
    for label, (key, moment) in crashed.items():
        run.restart(lease=SHORT_LEASE)
        try:
            reply = pay(run.port, key, BODY, timeout=5, headers={"X-Test-Crash": moment})
            sc.expect(False, f"{label}: the service answered {reply.status} instead of dying")
        except (OSError, http.client.HTTPException):
            pass
        sc.expect(run.service.wait_exit(5) == -signal.SIGKILL, f"{label}: the service did not die of SIGKILL")
    charged = {label: run.charge_of(key) for label, (key, _) in crashed.items()}
    sc.expect(charged["retry"]["charges"] == 1 and charged["reconciled"]["charges"] == 1
              and charged["uncharged"]["charges"] == 0, f"provider before restart: {charged}")
    sc.note("3× SIGKILL (2 after charge, 1 before)")

    # 1. The client comes back: after the lease its retry recovers the key and reconciles with the provider.
    run.restart()
    key = crashed["retry"][0]
    seen = pay_until_answered(run.port, key, BODY, deadline=15)
    final, stats = seen.last, run.charge_of(key)
    sc.expect(final and final.status == 201 and final.outcome == "recovered",
              f"retry: {final and (final.status, final.outcome)}, want 201 recovered")
    sc.expect(charge_id(final) == stats["charge"]["id"], "retry: not the charge the dead owner made")
    sc.expect(stats["calls"] == 1 and stats["lookups"] >= 1, f"retry: provider {stats}")
    again = pay(run.port, key, BODY)
    sc.expect(again.replayed and again.raw == final.raw,
              f"retry: the next retry is not the same replay, byte for byte: {again.raw!r} after {final.raw!r}")
    sc.note(f"retry: {sum(r.status == 409 for r in seen.replies)}×409 then recovered 201 {charge_id(final)}, "
            f"charges={stats['charges']} calls={stats['calls']}")

    # 2. Nobody comes back: the reconciler loop finishes the charged key and releases the uncharged one.
    run.restart(reconcile_every="0.5")
    charged_key, uncharged_key = crashed["reconciled"][0], crashed["uncharged"][0]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        states = (lookup(run.database_url, SCOPE, charged_key), lookup(run.database_url, SCOPE, uncharged_key))
        if states == ("replay", None):
            break
        time.sleep(0.2)
    sc.expect(states == ("replay", None), f"reconciler: idem_lookup says {states}, want (replay, NULL)")
    reply, stats = pay(run.port, charged_key, BODY), run.charge_of(charged_key)
    sc.expect(reply.status == 201 and reply.replayed and charge_id(reply) == stats["charge"]["id"]
              and stats["calls"] == 1, f"reconciled: {reply.status} replayed={reply.replayed}, provider {stats}")
    reply, stats = pay(run.port, uncharged_key, BODY), run.charge_of(uncharged_key)
    sc.expect(reply.status == 201 and reply.outcome == "claimed" and stats["charges"] == 1 and stats["calls"] == 1,
              f"released: {reply.status} {reply.outcome}, provider {stats}")
    sc.note("reconciler: finished the charged key, released the other; retries: replay, claimed; one charge each")


def double_tap(run, sc, clients=50):
    key = run.key("tap")
    run.provider.fault(key, delay=0.3)  # so the 50 really overlap the charge
    barrier = threading.Barrier(clients)

    def client(_):
        barrier.wait(timeout=10)
        try:
            first = pay(run.port, key, BODY, timeout=10)
        except (OSError, http.client.HTTPException) as e:
            return type(e).__name__, None
        if first.status == 409 and "retry-after" not in first.headers:
            return "409 without Retry-After", None
        final = first if first.final else pay_until_answered(run.port, key, BODY).last
        return first.outcome, final

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    firsts = Counter(outcome for outcome, _ in results)
    answers = {json.dumps([f.status, f.body], sort_keys=True) if f else None for _, f in results}
    stats = run.charge_of(key)
    final = results[0][1]
    sc.expect(firsts["claimed"] == 1 and firsts["claimed"] + firsts["in_progress"] + firsts["replay"] == clients,
              f"first answers {dict(firsts)}: want one claimed, the others in_progress or replay")
    sc.expect(len(answers) == 1 and final and final.status == 201, f"final answers differ: {answers}")
    sc.expect(stats["charges"] == 1 and stats["calls"] == 1, f"provider {stats}")
    sc.expect(charge_id(final) == (stats["charge"] or {}).get("id"), "the answer is not the provider's charge")
    sc.note(f"first answers {dict(firsts)}; all {clients} hold 201 {charge_id(final)}; "
            f"charges={stats['charges']} calls={stats['calls']}")


def lost_response(run, sc):
    key = run.key("lost")
    run.provider.fault(key, delay=1.5)
    try:
        pay(run.port, key, BODY, timeout=0.5)
        sc.expect(False, "the first attempt should have timed out")
    except TimeoutError:
        pass
    seen = pay_until_answered(run.port, key, BODY)
    final, stats = seen.last, run.charge_of(key)
    sc.expect(final and final.status == 201 and final.replayed, "the retry's answer is not a flagged replay")
    sc.expect(stats["charges"] == 1 and stats["calls"] == 1, f"provider {stats}")
    sc.expect(charge_id(final) == (stats["charge"] or {}).get("id"), "the replay is not the provider's charge")
    sc.note(f"timeout at 0.5 s; retries: {sum(r.status == 409 for r in seen.replies)}×409 then 201 "
            f"Idempotent-Replayed: true; charges={stats['charges']} calls={stats['calls']}")


def provider_refused(run, sc):
    key = run.key("refused")
    run.provider.fault(key, fail=1)
    first = pay(run.port, key, BODY)
    retry = pay_until_answered(run.port, key, BODY).last
    stats = run.charge_of(key)
    sc.expect(first.status == 503 and "retry-after" in first.headers, f"first: {first.status}, want 503")
    sc.expect(retry and retry.status == 201 and retry.outcome == "claimed",
              f"retry: {retry and (retry.status, retry.outcome)}, want 201 claimed (the key was released)")
    sc.expect(stats["refused"] == 1 and stats["charges"] == 1 and stats["calls"] == 1, f"provider {stats}")
    sc.note(f"503 (released), retry claimed 201; refused={stats['refused']} charges={stats['charges']}")


def card_declined(run, sc):
    key = run.key("declined")
    run.provider.fault(key, decline=True)
    first, retry = pay(run.port, key, BODY), pay(run.port, key, BODY)
    stats = run.charge_of(key)
    sc.expect(first.status == 402 and retry.status == 402 and retry.replayed, f"{first.status}, {retry.status}")
    sc.expect(retry.raw == first.raw, f"the replayed 402 differs from the first: {retry.raw!r} vs {first.raw!r}")
    sc.expect(stats["declined"] == 1 and stats["charges"] == 0, f"provider {stats}")
    sc.note(f"402, retry 402 replayed without asking the provider; declined={stats['declined']}")


def key_reuse(run, sc):
    key = run.key("reuse")
    first = pay(run.port, key, BODY)
    other = pay(run.port, key, {**BODY, "amount": 9999})
    reordered = pay(run.port, key, '{"customer_id": "cus_1",   "currency": "EUR", "amount": 1000}')
    stats = run.charge_of(key)
    sc.expect(first.status == 201, f"first: {first.status}")
    sc.expect(other.status == 422, f"different body: {other.status}, want 422")
    sc.expect(reordered.status == 201 and reordered.replayed,
              "same body with other key order and spacing: not a replay")
    # The first answer's bytes, not an equal JSON value: clients hash, sign or length-check a body.
    sc.expect(reordered.raw == first.raw,
              f"the replay is not the first answer byte for byte: {reordered.raw!r} vs {first.raw!r}")
    sc.expect(stats["charges"] == 1 and stats["calls"] == 1, f"provider {stats}")
    sc.note(f"different body 422; reordered JSON replayed byte for byte ({len(first.raw)} bytes); "
            f"charges={stats['charges']} calls={stats['calls']}")


def missing_key(run, sc):
    before = run.provider.stats(prefix="")
    no_key = pay(run.port, None, BODY)
    not_json = pay(run.port, run.key("not-json"), "amount=1000")
    after = run.provider.stats(prefix="")
    sc.expect(no_key.status == 400, f"no key: {no_key.status}, want 400")
    sc.expect(not_json.status == 400, f"body not JSON: {not_json.status}, want 400")
    sc.expect(after["calls"] == before["calls"] and after["refused"] == before["refused"], "the provider was called")
    sc.note("no key 400, body not JSON 400; provider not called")


def retry_storm(run, sc, payments=200, workers=16):
    """Every client gives up after a random 50-600 ms for up to 4 attempts, then waits patiently; the provider
    is jittery and refuses 5% of calls."""
    run.provider.fault("*", jitter=0.4, fail_rate=0.05)
    started = time.monotonic()

    def client(i):
        key = run.key(f"storm-{i}")
        body = {**BODY, "amount": 100 + i}
        timeouts = [random.uniform(0.05, 0.6) for _ in range(4)] + [5.0]
        return key, body, pay_until_answered(run.port, key, body, timeouts=timeouts, deadline=30)

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(client, range(payments)))
    run.provider.reset()
    stats = run.provider.stats(prefix=run.key("storm-"))
    answered = [(key, body, seen.last) for key, body, seen in results if seen.last and seen.last.status == 201]
    wrong = [key for key, body, reply in answered
             if reply.body.get("amount") != body["amount"] or charge_id(reply) != run.charge_of(key)["charge"]["id"]]
    replies = [r for _, _, seen in results for r in seen.replies]
    unanswered = Counter(f"{seen.last.status}{' replayed' if seen.last.replayed else ''} {seen.last.body}"
                         if seen.last else "no answer" for _, _, seen in results
                         if not (seen.last and seen.last.status == 201))
    sc.expect(len(answered) == payments, f"{payments - len(answered)} payments without a 201 (their last answers: "
              f"{dict(unanswered)})")
    sc.expect(not wrong, f"answers that are not the provider's charge: {wrong[:3]}")
    sc.expect(stats["charges"] == payments, f"charges {stats['charges']} != payments {payments}")
    sc.expect(not stats["double_charged"] and stats["calls"] == payments,
              f"double charged: {stats['double_charged'][:3]} (calls {stats['calls']})")
    sc.note(f"{payments} payments, {len(replies) + sum(s.timeouts + s.dropped for _, _, s in results)} attempts "
            f"({sum(s.timeouts for _, _, s in results)} timed out, {sum(r.status == 409 for r in replies)}×409, "
            f"{sum(r.status == 503 for r in replies)}×503, {sum(r.replayed for r in replies)} replays) in "
            f"{time.monotonic() - started:.1f} s; charges={stats['charges']} double charges="
            f"{len(stats['double_charged'])}")


SCENARIOS = [
    ("dead inverter (SIGKILL)", dead_inverters),
    ("double tap (50 concurrent)", double_tap),
    ("lost response", lost_response),
    ("provider refused (503)", provider_refused),
    ("card declined (402)", card_declined),
    ("key reuse, other body", key_reuse),
    ("missing key / bad body", missing_key),
    ("retry storm 200 × 5", retry_storm),
]


def attack(run):
    rows = []
    run.restart()
    try:
        for name, scenario in SCENARIOS:
            sc, started = Scenario(name), time.monotonic()
            try:
                scenario(run, sc)
            except Exception as e:  # a broken scenario is a failed row, and the next one still runs
                sc.failures.append(f"{type(e).__name__}: {e}")
            finally:
                run.provider.reset()
                if run.service.popen.poll() is not None:  # a scenario that left it dead must not break the next
                    run.restart()
            rows.append((sc, time.monotonic() - started))
    finally:
        run.service.stop()
    print(f"\n== {run.name}: examples/{run.name} ==")
    print(f"{'scenario':<28} {'result':<6} {'time':>6}  observed")
    for sc, seconds in rows:
        print(f"{sc.name:<28} {'FAIL' if sc.failures else 'PASS':<6} {seconds:5.1f}s  {'; '.join(sc.notes)}")
        for failure in sc.failures:
            print(f"{'':<43}! {failure}")
    if any(sc.failures for sc, _ in rows):
        print(f"-- last lines of {run.service.log_path}:\n{run.service.log_tail()}")
    sys.stdout.flush()
    return rows


# How each service's driver must be set up behind a transaction pooler: no named prepared statement may outlive
# one transaction. pgx v5 caches each statement's description, got once through the unnamed statement, and sends
# every query with its own parse instead of preparing it; psycopg stops preparing; node-postgres only ever uses the
# unnamed statement for a query without a name.
POOLED_DRIVER_SETTINGS = {
    "go": lambda url: {"DATABASE_URL": url + ("&" if "?" in url else "?") + "default_query_exec_mode=cache_describe"},
    "python": lambda url: {"DATABASE_TRANSACTION_POOLER": "1"},
    "node": lambda url: {},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True, help="the harness's own checks go here")
    parser.add_argument("--service-database-url", help="where the services connect (default: --database-url)")
    parser.add_argument("--transaction-pooler", action="store_true",
                        help="the services' URL is PgBouncer in transaction pooling mode: configure each driver "
                             "for it (docs/operations.md)")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--base-port", type=int, default=25480)
    # No choices=: argparse before 3.12 refuses an empty list against them.
    parser.add_argument("services", nargs="*", help=f"any of {', '.join(SERVICES)} (default: all)")
    args = parser.parse_args()
    services = args.services or list(SERVICES)
    for name in services:
        if name not in SERVICES:
            parser.error(f"unknown service {name!r}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop our children

    provider = Process("provider", [sys.executable, str(REPO / "examples/provider/provider.py"),
                                    "--port", str(args.base_port)], {}, args.workdir)
    rows = []
    try:
        provider.start()
        provider.wait_listening(args.base_port)
        for offset, name in enumerate(services, start=1):
            port = args.base_port + offset
            env = {"DATABASE_URL": args.service_database_url or args.database_url,
                   "PROVIDER_URL": f"http://127.0.0.1:{args.base_port}",
                   "LISTEN_ADDR": f"127.0.0.1:{port}", "IDEM_TEST_HOOKS": "1"}
            if args.transaction_pooler:
                env.update(POOLED_DRIVER_SETTINGS[name](env["DATABASE_URL"]))
            service = Process(name, SERVICES[name], env, args.workdir)
            rows += attack(Run(name, port, service, Provider(args.base_port), args.database_url))
    finally:
        provider.stop()
    failed = sum(bool(sc.failures) for sc, _ in rows)
    print(f"\ne2e: {len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
