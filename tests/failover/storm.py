#!/usr/bin/env python3
"""A retry storm across a failover (tests/failover/ha.sh runs it around each fault). Two kinds of client, all
through one multi-host connection string:
  - SQL clients: claim + finish cycles over psycopg with a 2 s lease; each finish stores bytes no other attempt
    could produce, so a lost answer cannot hide behind an identical re-run;
  - HTTP clients of the Go, Python and Node payment services (examples/), which use the same string.
Each client retries every key until it holds an answer, as real clients do. When the stop file appears, the
storm ends and checks: every answer a client received (an acknowledged finish, or a replay) still replays,
byte for byte; no key was answered two ways; the provider charged nobody twice and charged once per successful
payment; every error a client saw is one it retries. It prints the longest pause (the longest time in which no
client got an answer). Exits 1 if a check failed. Run with examples/python/.venv/bin/python (psycopg)."""
import argparse
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests/e2e"))
from attack import SERVICES  # noqa: E402  (the three example services, as the e2e attack starts them)
from harness import Process, Provider, pay  # noqa: E402

SQL_CLIENTS = 4
HTTP_CLIENTS_PER_SERVICE = 2
LEASE = "2s"  # a cut-off owner's key is recovered two seconds later
KEY_DEADLINE = 150.0  # seconds one key may take to get its answer, failover included
STATEMENT_TIMEOUT = "5s"  # a replay waiting for the standby ends as 57014, which a client retries
# What a client retries: the connection is gone or not possible yet (class 08, 57P01-57P03), the server is
# read-only for now (25006: a session that outlived a demotion), a timeout (57014).
RETRIED_SQLSTATES = {"57P01", "57P02", "57P03", "57014", "25006"}
BODY = {"amount": 1000, "currency": "EUR", "customer_id": "cus_ha"}
REQUEST = psycopg.types.json.Jsonb({"amount": 1000})  # every SQL key's request: the keys differ


class Tally:
    """What every client saw, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answers = {}  # (kind, key) -> list of (status, bytes) every answer the client received
        self.answered_at = []  # monotonic time of every answer
        self.errors = Counter()  # what clients saw and retried, by kind
        self.unexpected = []  # errors a client would not retry
        self.unanswered = []

    def answer(self, kind, key, status, body):
        with self.lock:
            self.answers.setdefault((kind, key), []).append((status, bytes(body)))
            self.answered_at.append(time.monotonic())

    def error(self, what, retried=True):
        with self.lock:
            if retried:
                self.errors[what] += 1
            else:
                self.unexpected.append(what)


def sql_error_kind(e):
    state = getattr(e, "sqlstate", None)
    if state is None:  # no server answer: the connection broke or never came up
        return "connection", True
    return state, state.startswith("08") or state in RETRIED_SQLSTATES


def reported(client):
    """A client that dies of a bug in this script is a failed check, not a silent gap in the storm."""
    def run(*args):
        tally = args[-1]
        try:
            client(*args)
        except Exception as e:  # noqa: BLE001
            tally.error(f"{client.__name__} died: {e!r}", retried=False)
    return run


class SqlSession:
    """One SQL client's connection, reopened after an error."""

    def __init__(self, url):
        self.url, self.conn = url, None

    def execute(self, sql, params):
        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.url, autocommit=True, options=f"-c statement_timeout={STATEMENT_TIMEOUT}")
        return self.conn.execute(sql, params)

    def reset(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def after_error(self):
        """An error the server sent (a router's 08006, a 57014) leaves the connection usable; a lost one not."""
        if self.conn is not None and (self.conn.closed or self.conn.broken):
            self.reset()


def sql_attempt(session, scope, key, tries, tally):
    """One try at a key: the seconds to wait before the next try, or None once the key is done. Errors back
    off as clients do: 50 ms, doubling with each try, at most 1 s."""
    try:
        outcome, token, status, body, retry_after = session.execute(
            "SELECT outcome, token, status_code, response_bytes, retry_after"
            " FROM idem_claim(%s, %s, %s::jsonb, lease => %s)", (scope, key, REQUEST, LEASE)).fetchone()
        if outcome in ("claimed", "recovered"):
            mine = f"{key} answered by attempt {secrets.token_hex(6)}".encode()
            session.execute("SELECT idem_finish(%s, %s, %s, 201, %s::bytea)", (scope, key, token, mine))
            tally.answer("sql", key, 201, mine)
            return None
        if outcome == "replay":
            tally.answer("sql", key, status, body)
            return None
        if outcome == "in_progress":
            return min(retry_after or 1, 0.25)
        tally.error(f"outcome {outcome}", retried=False)
        return None
    except psycopg.Error as e:
        kind, retried = sql_error_kind(e)
        tally.error(f"sql {kind}", retried)
        session.after_error()
        return min(0.05 * 2 ** tries, 1.0) if retried else None


@reported
def sql_client(url, scope, number, stop, tally):
    """Like a server's worth of clients: a key that must wait (in progress, or an error to retry) is parked
    and retried when due, and the client goes on with new keys meanwhile, so a key whose partition is away
    holds up only itself. Once stopped, it finishes every parked key."""
    session, n, parked = SqlSession(url), 0, []  # parked: [due, key, deadline, tries]
    while True:
        now = time.monotonic()
        parked.sort()
        if parked and (parked[0][0] <= now or stop.is_set()):
            due, key, deadline, tries = parked.pop(0)
            if due > now:
                time.sleep(due - now)
        elif stop.is_set():
            break
        else:
            n += 1
            key, deadline, tries = f"sql{number}-{n}", now + KEY_DEADLINE, 0
        wait = sql_attempt(session, scope, key, tries, tally)
        if wait is not None:
            if time.monotonic() + wait > deadline:
                tally.unanswered.append(("sql", key))
            else:
                parked.append([time.monotonic() + wait, key, deadline, tries + 1])
    session.reset()


@reported
def http_client(service, port, scope, number, stop, tally):
    n = 0
    while not stop.is_set():
        n += 1
        key, end = f"{scope}-{service}{number}-{n}", time.monotonic() + KEY_DEADLINE
        while True:
            if time.monotonic() > end:
                tally.unanswered.append((service, key))
                break
            try:
                reply = pay(port, key, BODY, timeout=10)
            except (OSError, ConnectionError) as e:
                tally.error(f"{service} {type(e).__name__}")
                time.sleep(0.1)
                continue
            # 409 (in progress) and every 5xx (the service lost its database, or the provider's answer) say
            # "come back later"; Stripe's clients retry those with the same key too.
            if reply.status == 409 or reply.status >= 500:
                tally.error(f"{service} {reply.status}")
                time.sleep(reply.retry_after())
                continue
            if reply.status != 201:
                tally.error(f"{service} final {reply.status}", retried=False)
            tally.answer(service, key, reply.status, reply.raw)
            break


def longest_pause(times, start, end):
    marks = [start] + sorted(t for t in times if start <= t <= end) + [end]
    return max(b - a for a, b in zip(marks, marks[1:]))


def verify(args, scope, tally, failures):
    """Every answer still replays, identically; nothing was charged twice."""
    lost = []
    for (kind, key), seen in tally.answers.items():
        if len(set(seen)) > 1:
            lost.append(f"{kind} {key} answered two ways: {seen}")
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        for (kind, key), seen in tally.answers.items():
            status, body = seen[0]
            if kind == "sql":
                row = conn.execute("SELECT outcome, status_code, response_bytes FROM idem_claim(%s, %s, %s::jsonb)",
                                   (scope, key, REQUEST)).fetchone()
                if row[0] != "replay" or row[1] != status or bytes(row[2]) != body:
                    lost.append(f"sql {key}: received {status} {body!r}, now {row[0]} {row[1]} {row[2]!r}")
    for (kind, key), seen in tally.answers.items():
        if kind == "sql":
            continue
        status, body = seen[0]
        reply = pay(args.base_port + 1 + list(SERVICES).index(kind), key, BODY, timeout=10)
        if not reply.replayed or reply.status != status or reply.raw != body:
            lost.append(f"{kind} {key}: received {status} {body!r}, now {reply.status} {reply.raw!r}")
    if lost:
        failures.append(f"{len(lost)} answers lost or changed: {lost[:5]}")
    charged = Provider(args.base_port).stats(prefix=scope + "-")
    payments = sum(1 for (kind, _), seen in tally.answers.items() if kind != "sql" and seen[0][0] == 201)
    if charged["double_charged"]:
        failures.append(f"charged twice: {charged['double_charged'][:5]}")
    if charged["charges"] != payments:
        failures.append(f"{charged['charges']} charges for {payments} successful payments")
    return payments, charged


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--database-url", required=True, help="the multi-host string every client uses")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--base-port", type=int, required=True, help="the provider; the services take the next 3")
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--max-seconds", type=float, default=300)
    parser.add_argument("--max-pause", type=float, help="fail if no client got an answer for longer than this")
    parser.add_argument("--expect-error", action="append", default=[],
                        help="an error kind (as in the retried counts, e.g. 'sql 08006') that must have happened")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop our children
    scope = f"ha-{args.scenario}-{secrets.token_hex(3)}"
    tally, stop, failures = Tally(), threading.Event(), []
    provider = Process("provider", [sys.executable, str(REPO / "examples/provider/provider.py"),
                                    "--port", str(args.base_port)], {}, args.workdir)
    services = []
    try:
        provider.start()
        provider.wait_listening(args.base_port)
        for offset, name in enumerate(SERVICES, start=1):
            env = {"DATABASE_URL": args.database_url, "PROVIDER_URL": f"http://127.0.0.1:{args.base_port}",
                   "LISTEN_ADDR": f"127.0.0.1:{args.base_port + offset}", "IDEM_LEASE": LEASE,
                   "IDEM_RECONCILE_EVERY": "0"}
            service = Process(f"{name}-{args.scenario}", SERVICES[name], env, args.workdir)
            service.start()
            services.append(service)
            service.wait_listening(args.base_port + offset)
        # Daemon threads: a SIGTERM (the test failed elsewhere) ends the process without waiting for them.
        threads = [threading.Thread(target=sql_client, args=(args.database_url, scope, i, stop, tally), daemon=True)
                   for i in range(SQL_CLIENTS)]
        threads += [threading.Thread(target=http_client, daemon=True,
                                     args=(name, args.base_port + offset, scope, i, stop, tally))
                    for offset, name in enumerate(SERVICES, start=1) for i in range(HTTP_CLIENTS_PER_SERVICE)]
        start = time.monotonic()
        for t in threads:
            t.start()
        stop_file = Path(args.stop_file)
        while not stop_file.exists() and time.monotonic() - start < args.max_seconds:
            time.sleep(0.1)
        end = time.monotonic()
        if not stop_file.exists():
            failures.append(f"no stop file after {args.max_seconds} s")
        stop.set()  # each client finishes the key it holds, then stops
        for t in threads:
            t.join(KEY_DEADLINE + 20)
        if any(t.is_alive() for t in threads):
            failures.append("a client did not stop")
        pause = longest_pause(tally.answered_at, start, end)
        payments, charged = verify(args, scope, tally, failures)
        if tally.unanswered:
            failures.append(f"{len(tally.unanswered)} keys never got an answer: {tally.unanswered[:5]}")
        if args.max_pause is not None and pause > args.max_pause:
            failures.append(f"the longest pause, {pause:.1f} s, is over {args.max_pause} s")
        for kind in args.expect_error:
            if not tally.errors.get(kind):
                failures.append(f"no client saw {kind!r}")
        if not tally.errors:
            failures.append("no client saw the fault: the scenario did not happen during the storm")
        if tally.unexpected:
            failures.append(f"errors a client does not retry: {Counter(tally.unexpected).most_common(5)}")
        sql_answers = sum(1 for kind, _ in tally.answers if kind == "sql")
        print(f"storm ({args.scenario}): {sql_answers} SQL keys and {payments} payments answered in {end - start:.0f} s;"
              f" {charged['charges']} charges, {len(charged['double_charged'])} double; longest pause {pause:.1f} s;"
              f" retried: {dict(tally.errors.most_common())}")
    finally:
        stop.set()
        for service in services:
            service.stop()
        provider.stop()
    for f in failures:
        print(f"storm ({args.scenario}): FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
