"""A claim and replay load through the Citus coordinator while shards move (tests/citus/run.sh), then the check
that nothing was lost or claimed twice.

  load.py APP_URL STATE          runs until STATE.stop exists (at most 600 s); writes STATE.started when
                                 the load runs, STATE (JSON) at the end
  load.py --verify APP_URL STATE every finished key of STATE replays its own answer; every held key is
                                 still in progress

Four clients: two claim and finish new keys over 32 scopes, replaying earlier ones; two claim the held keys
(claimed at the start with a 10-minute lease and never finished) again and again, which must never answer
`claimed`. A call that fails while a shard's writes are blocked for its cut-over is retried with the same key,
as a client would: its outcome then says whether the first try took effect.
"""
import json
import os
import random
import sys
import threading
import time

import psycopg

VERIFY = sys.argv[1] == "--verify"
APP, STATE = sys.argv[-2], sys.argv[-1]
SCOPES = [f"load-{i}" for i in range(32)]
CLAIM = "SELECT (r).outcome, (r).token, (r).response_bytes FROM (SELECT idem_claim(%s, %s, %s::jsonb, lease => %s::interval) AS r) s"


def connect():
    return psycopg.connect(APP, autocommit=True)


def retrying(conn_box, sql, params, errors, attempts=50):
    for _ in range(attempts):
        try:
            return conn_box[0].execute(sql, params).fetchone()
        except psycopg.OperationalError as e:
            errors.append(f"{e.sqlstate} {str(e).splitlines()[0][:120]}")
            time.sleep(0.1)
            if conn_box[0].closed or conn_box[0].broken:
                conn_box[0] = connect()
        except psycopg.Error as e:
            errors.append(f"{e.sqlstate} {str(e).splitlines()[0][:120]}")
            time.sleep(0.1)
    raise RuntimeError(f"gave up after {attempts} tries: {errors[-1]}")


def run():
    deadline = time.monotonic() + 600
    finished, held, problems, errors = {}, [], [], []
    with connect() as c:
        for i in range(16):
            scope, key = SCOPES[i * 2], f"held-{i}"
            outcome = c.execute(CLAIM, (scope, key, "{}", "10 minutes")).fetchone()[0]
            if outcome != "claimed":
                problems.append(f"held key {scope}/{key}: {outcome}")
            held.append([scope, key])
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n):
        box, rng, i = [connect()], random.Random(n), 0
        while not stop.is_set():
            scope, key = rng.choice(SCOPES), f"w{n}-{i}"
            i += 1
            body = json.dumps({"n": n, "i": i})
            outcome, token, _ = retrying(box, CLAIM, (scope, key, body, "10 minutes"), errors)
            if outcome == "claimed":
                answer = f"answer {scope}/{key}".encode()
                retrying(box, "SELECT idem_finish(%s, %s, %s, 200, %s::bytea)", (scope, key, token, answer), errors)
                with lock:
                    finished[f"{scope}\n{key}"] = [body, answer.decode()]
            elif outcome != "in_progress":  # in_progress: a retried claim whose first try took (no token now)
                with lock:
                    problems.append(f"new key {scope}/{key}: {outcome}")
            if finished and rng.random() < 0.5:
                with lock:
                    k, (b, a) = rng.choice(list(finished.items()))
                s, kk = k.split("\n")
                got = retrying(box, CLAIM, (s, kk, b, None), errors)
                if got[0] != "replay" or bytes(got[2]).decode() != a:
                    with lock:
                        problems.append(f"replay of {s}/{kk}: {got[0]}")
        box[0].close()

    def contender(n):
        box, rng = [connect()], random.Random(100 + n)
        while not stop.is_set():
            scope, key = rng.choice(held)
            outcome = retrying(box, CLAIM, (scope, key, "{}", None), errors)[0]
            if outcome != "in_progress":
                with lock:
                    problems.append(f"held key {scope}/{key} answered {outcome}")
        box[0].close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=contender, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    open(STATE + ".started", "w").close()
    while not os.path.exists(STATE + ".stop") and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(60)
    json.dump({"finished": finished, "held": held, "problems": problems, "errors": errors}, open(STATE, "w"))
    print(f"load: {len(finished)} keys finished, {len(errors)} calls retried during the moves"
          + (f" ({sorted(set(e[:5] for e in errors))})" if errors else ""))
    for p in problems[:20]:
        print(f"FAIL  load: {p}")
    sys.exit(1 if problems or not finished else 0)


def verify():
    state = json.load(open(STATE))
    bad = []
    with connect() as c:
        for k, (body, answer) in state["finished"].items():
            scope, key = k.split("\n")
            got = c.execute(CLAIM, (scope, key, body, None)).fetchone()
            if got[0] != "replay" or bytes(got[2]).decode() != answer:
                bad.append(f"{scope}/{key}: {got[0]}")
        for scope, key in state["held"]:
            outcome = c.execute(CLAIM, (scope, key, "{}", None)).fetchone()[0]
            if outcome != "in_progress":
                bad.append(f"held {scope}/{key}: {outcome}")
    print(f"{'PASS' if not bad else 'FAIL'}  after the rebalance: {len(state['finished'])} finished keys replay"
          f" their own answers, {len(state['held'])} held keys are still in progress" + (f": {bad[:10]}" if bad else ""))
    sys.exit(1 if bad else 0)


verify() if VERIFY else run()
