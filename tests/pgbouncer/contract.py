"""The idem_keys contract through PgBouncer in transaction pooling mode, with psycopg set up as it must be there
(prepare_threshold=None), and the two traps docs/operations.md warns about, reproduced.

Usage: contract.py URL TRAP_URL
  URL       PgBouncer's database "shop": a pool of 4 server connections for the many clients below
  TRAP_URL  PgBouncer's database "trap": one server connection, so that two clients share it for certain
Exits 1 if any check fails; prints one line per check.
"""
import pathlib
import sys
import threading
import time
import uuid

import psycopg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from checklist import Checklist  # noqa: E402 (after the path it is found on)

URL, TRAP_URL = sys.argv[1], sys.argv[2]
RUN = uuid.uuid4().hex[:8]
CLAIM = """SELECT (r).outcome, (r).token, (r).attempt, (r).status_code, (r).response_bytes, (r).headers::text,
                  (r).retry_after
             FROM (SELECT idem_claim(%s, %s, %s::jsonb, lease => %s::interval, wait => %s::interval) AS r) s"""
FINISH = "SELECT idem_finish(%s, %s, %s, %s, %s::bytea, headers => %s::jsonb)"
BODY = '{"amount": 1000, "currency": "EUR"}'
ANSWER = b'{"charge_id":"ch_1", "amount":1000}'  # bytes that jsonb would reorder and respace
checks = Checklist()
check = checks.check


def connect(url=URL, **options):
    return psycopg.connect(url, autocommit=True, prepare_threshold=None, **options)


def claim(conn, key, body=BODY, lease=None, wait=None):
    return conn.execute(CLAIM, ("pgb", key, body, lease, wait)).fetchone()


def sqlstate(action):
    try:
        action()
    except psycopg.Error as e:
        return e.sqlstate
    return None


def key(name):
    return f"{RUN}-{name}"


def contract():
    a, b = connect(), connect()
    first = claim(a, key("pay"))
    check("claimed: token and attempt 1", first[0] == "claimed" and first[1] and first[2] == 1, first)
    a.execute(FINISH, ("pgb", key("pay"), first[1], 201, ANSWER, '{"Location": "/ch_1"}'))
    again = claim(b, key("pay"))
    check("replay: status, body byte for byte, headers",
          again[0] == "replay" and again[3] == 201 and bytes(again[4]) == ANSWER
          and again[5] == '{"Location": "/ch_1"}', again)
    check("mismatch", claim(b, key("pay"), '{"amount": 9999}')[0] == "mismatch")

    busy = claim(a, key("busy"), lease="1 minute")
    seen = claim(b, key("busy"))
    check("in_progress with retry_after", busy[0] == "claimed" and seen[0] == "in_progress" and seen[6] >= 1, seen)

    short = claim(a, key("lapsed"), lease="1 second")
    time.sleep(1.2)
    recovered = claim(b, key("lapsed"))
    check("recovered after a short lease: attempt 2, a new token",
          recovered[0] == "recovered" and recovered[2] == 2 and recovered[1] > short[1], recovered)

    check("an error keeps its SQLSTATE: finish by a token that does not own the key is 55000",
          sqlstate(lambda: a.execute(FINISH, ("pgb", key("busy"), busy[1] + 1000, 200, b"{}", None))) == "55000")
    check("an error keeps its SQLSTATE: a NULL key is 22004", sqlstate(lambda: claim(a, None)) == "22004")


def waiting():
    a, b = connect(), connect()
    owner = claim(a, key("wait"))
    result = {}

    def waiter():
        started = time.monotonic()
        result["row"] = claim(b, key("wait"), wait="10 seconds")
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.5)
    a.execute(FINISH, ("pgb", key("wait"), owner[1], 201, ANSWER, None))
    thread.join(15)
    row, seconds = result.get("row"), result.get("seconds", 99)
    check("wait: a claim waiting on a busy key gets the owner's answer when it finishes",
          row is not None and row[0] == "replay" and 0.4 < seconds < 5, (row, seconds))


def same_transaction():
    a, b = connect(), connect()
    with a.transaction():
        mine = claim(a, key("txn"))
        a.execute(FINISH, ("pgb", key("txn"), mine[1], 201, ANSWER, None))
    check("same-transaction mode: claim and finish commit together", claim(b, key("txn"))[0] == "replay")
    try:
        with a.transaction():
            claim(a, key("rolled-back"))
            raise psycopg.Rollback()
    except psycopg.Rollback:
        pass
    check("same-transaction mode: a rollback takes the claim with it", claim(b, key("rolled-back"))[0] == "claimed")
    # SET LOCAL lasts exactly one transaction, which is what transaction pooling keeps on one server connection.
    with a.transaction():
        a.execute("SET LOCAL idem_keys.lease = '1s'")
        claim(a, key("set-local"))
    time.sleep(1.2)
    check("SET LOCAL idem_keys.lease applies to the claim in its transaction",
          claim(b, key("set-local"))[0] == "recovered")


def many_clients():
    errors_seen = []

    def client(n):
        try:
            with connect() as conn:
                for i in range(20):
                    k = key(f"many-{n}-{i}")
                    got = claim(conn, k)
                    conn.execute(FINISH, ("pgb", k, got[1], 201, ANSWER, None))
                    if claim(conn, k)[0] != "replay":
                        errors_seen.append((k, "no replay"))
        except psycopg.Error as e:
            errors_seen.append((n, e.sqlstate, str(e)))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check("16 clients on 4 server connections: 320 claim/finish/replay cycles, no error", not errors_seen,
          errors_seen[:3])


def traps():
    """What goes wrong without the setup: both clients share the one server connection of database trap."""
    def repeated(prepare_threshold):
        failed = []
        conns = [psycopg.connect(TRAP_URL, autocommit=True, prepare_threshold=prepare_threshold) for _ in range(2)]
        for i in range(7):  # psycopg's default threshold prepares a statement on its sixth run
            for n, conn in enumerate(conns):
                k = key(f"trap-{prepare_threshold}-{n}-{i}")
                try:
                    claim(conn, k)
                except psycopg.Error as e:
                    failed.append(e.sqlstate)
        for conn in conns:
            conn.close()
        return failed

    default = repeated(5)
    check("psycopg's default (prepare_threshold=5) fails through transaction pooling: "
          "prepared statement \"_pg3_0\" already exists (42P05)", "42P05" in default, default)
    check("prepare_threshold=None: no error", repeated(None) == [])

    # A session SET is the server connection's, not the client's: the next client on it inherits it.
    a, b = connect(TRAP_URL), connect(TRAP_URL)
    a.execute("SET idem_keys.lease = '7s'")
    leaked = b.execute("SHOW idem_keys.lease").fetchone()[0]
    a.execute("RESET idem_keys.lease")
    check("a session SET under transaction pooling lands on whichever client uses that server next",
          leaked == "7s", leaked)


for scenario in (contract, waiting, same_transaction, many_clients, traps):
    scenario()
checks.exit("pgbouncer contract")
