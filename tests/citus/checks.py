"""idem_keys on Citus (a coordinator and two workers, idem_keys distributed by scope), run by tests/citus/run.sh
once per edition: the contract through the coordinator, one hop per keyed verb, rows in the shards and nowhere
else, every SQLSTATE a call through the coordinator can meet, a 12-way race on one key, fencing, tenant binding,
idem_stats and idem_stale over every shard. Prints one line per check; exits 1 if any failed.

Usage: checks.py EDITION COORDINATOR_URL APP_URL WORKER_URL...
  EDITION          extension | portable
  COORDINATOR_URL  the coordinator's database as a superuser
  APP_URL          the coordinator's database as idem_app, an application role granted nothing
  WORKER_URL       each worker's database as a superuser (for the checks' own look at the shards)
"""
import pathlib
import sys
import threading
import time
import uuid

import psycopg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from checklist import Checklist, error_of  # noqa: E402 (after the path it is found on)

EDITION, COORD, APP, WORKERS = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
RUN = uuid.uuid4().hex[:8]
# The call in FROM, as the middlewares make it: Citus delegates `SELECT … FROM verb(…)` and `SELECT verb(…)`,
# not an expression over the call such as `(idem_claim(…)).outcome` (docs/scale-out.md).
CLAIM = """SELECT r.outcome, r.token, r.attempt, r.status_code, r.response_bytes, r.headers::text, r.retry_after,
                  r.checkpoint
             FROM idem_claim(%s, %s, %s::jsonb, lease => %s::interval, wait => %s::interval) AS r"""
FINISH = "SELECT idem_finish(%s, %s, %s, %s, %s::bytea, headers => %s::jsonb)"
BODY = '{"amount": 1000, "currency": "EUR"}'
ANSWER = b'{"charge_id":"ch_1", "amount":1000}'
checks = Checklist(EDITION)
check = checks.check


def connect(url=COORD):
    return psycopg.connect(url, autocommit=True)


def key(name):
    return f"{RUN}-{name}"


def claim(conn, k, body=BODY, lease=None, wait=None, scope="shop"):
    return conn.execute(CLAIM, (scope, k, body, lease, wait)).fetchone()


def sqlstate(conn, sql, params=()):
    return (error_of(conn, sql, params) or ("",))[0]


def placement(scope):
    """(shard table name, worker port) of the shard that holds the scope's rows."""
    with connect() as c:
        return c.execute(
            """SELECT shard_name('idem_keys'::regclass, p.shardid), p.nodeport FROM pg_dist_shard_placement AS p
                WHERE p.shardid = get_shard_id_for_distribution_column('idem_keys', %s::text)""", (scope,)).fetchone()


def worker_at(port):
    return next(url for url in WORKERS if f"port={port}" in url)


def rows_in_shard(scope, k):
    shard, port = placement(scope)
    with connect(worker_at(port)) as w:
        # A worker hides shards from ordinary queries; a shard is read by its own name.
        # (shard: a name from Citus's catalog, quoted as regclass prints it)
        return w.execute(f"SELECT count(*) FROM {shard} WHERE scope = %s AND key = %s", (scope, k)).fetchone()[0]


def pushed_down(conn, sql, params):
    """Whether Citus ran the call on a worker as one statement (its DEBUG1 message says so)."""
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("SET client_min_messages = debug1")
    try:
        conn.execute(sql, params)
    finally:
        conn.execute("RESET client_min_messages")
    return any("pushing down the function call" in n for n in notices), notices


def contract():
    a, b = connect(APP), connect(APP)
    first = claim(a, key("pay"))
    check("claimed: token and attempt 1", first[0] == "claimed" and first[1] and first[2] == 1, first)
    a.execute(FINISH, ("shop", key("pay"), first[1], 201, ANSWER, '{"Location": "/ch_1"}'))
    again = claim(b, key("pay"))
    check("replay: status, body byte for byte, headers",
          again[0] == "replay" and again[3] == 201 and bytes(again[4]) == ANSWER
          and again[5] == '{"Location": "/ch_1"}', again)
    check("mismatch", claim(b, key("pay"), '{"amount": 9999}')[0] == "mismatch")
    check("the row is in the shard that holds its scope", rows_in_shard("shop", key("pay")) == 1)

    busy = claim(a, key("busy"), lease="1 minute")
    seen = claim(b, key("busy"))
    check("in_progress with retry_after", busy[0] == "claimed" and seen[0] == "in_progress" and seen[6] >= 1, seen)

    short = claim(a, key("lapsed"), lease="1 second")
    a.execute("SELECT idem_checkpoint('shop', %s, %s, 'charged', '{\"charge\": \"ch_9\"}')", (key("lapsed"), short[1]))
    time.sleep(1.2)
    recovered = claim(b, key("lapsed"))
    check("recovered after a short lease: attempt 2, another token, the checkpoint",
          recovered[0] == "recovered" and recovered[2] == 2 and recovered[1] != short[1]
          and recovered[7] == "charged", recovered)
    check("fencing: the dead owner's finish is refused (55000)",
          sqlstate(a, FINISH, ("shop", key("lapsed"), short[1], 200, b"{}", None)) == "55000")
    a.execute(FINISH, ("shop", key("lapsed"), recovered[1], 200, b"second", None))
    check("fencing: the new owner's answer is the one kept",
          bytes(claim(b, key("lapsed"))[4]) == b"second")

    gone = claim(a, key("released"))
    released = a.execute("SELECT idem_release('shop', %s, %s)", (key("released"), gone[1])).fetchone()[0]
    check("release, then the key is claimed afresh",
          released is True and claim(b, key("released"))[0] == "claimed")

    looked = a.execute("SELECT r.outcome, r.response_bytes FROM idem_lookup('shop', %s) AS r",
                       (key("pay"),)).fetchone()
    check("idem_lookup replays", looked[0] == "replay" and bytes(looked[1]) == ANSWER, looked)
    check("idem_lookup of an unknown key is NULL",
          a.execute("SELECT idem_lookup('shop', %s)::text", (key("never"),)).fetchone()[0] is None)

    owner = claim(a, key("wait"), lease="1 minute")
    got = {}

    def waiter():
        with connect(APP) as c:
            got["r"] = claim(c, key("wait"), wait="10 seconds")

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)
    a.execute(FINISH, ("shop", key("wait"), owner[1], 200, b"done", None))
    t.join(15)
    check("wait: a waiting claim gets the replay when the owner finishes",
          got.get("r", [None])[0] == "replay" and bytes(got["r"][4]) == b"done", got)
    a.close()
    b.close()


def one_hop():
    """Every keyed verb runs on the scope's worker as one statement, not statement by statement."""
    with connect(APP) as a:
        t = claim(a, key("hop"))[1]
        calls = [
            ("idem_claim", CLAIM, ("shop", key("hop2"), BODY, None, None)),
            ("idem_lookup", "SELECT idem_lookup('shop', %s)", (key("hop"),)),
            ("idem_checkpoint", "SELECT idem_checkpoint('shop', %s, %s, 'p')", (key("hop"), t)),
            ("idem_finish", FINISH, ("shop", key("hop"), t, 200, b"x", None)),
            ("idem_release", "SELECT idem_release('shop', %s, %s)", (key("hop2"), 1)),
        ]
        for verb, sql, params in calls:
            try:
                ok, notices = pushed_down(a, sql, params)
            except psycopg.Error as e:  # idem_release of a foreign token is P0002/55000, raised on the worker
                ok, notices = e.sqlstate in ("P0002", "55000"), [str(e)]
            check(f"one hop: {verb} is pushed down to the scope's worker", ok, notices[-3:])


def shards():
    """The rows are in the shards: every node's own idem_keys (the coordinator's table and the workers'
    shells) stays empty, and amcheck finds the shards' heaps and indexes sound."""
    for url in [COORD] + WORKERS:
        with connect(url) as c:
            size = c.execute("SELECT pg_relation_size('idem_keys')").fetchone()[0]
            check(f"no row written to the local idem_keys of the node at {url.split()[1]}", size == 0, size)
    with connect() as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS amcheck")  # on the coordinator: Citus creates it on every node
    for url in WORKERS:
        with connect(url) as w:
            w.execute("SET citus.override_table_visibility = off")
            names = [r[0] for r in w.execute(
                "SELECT c.oid::regclass::text FROM pg_class AS c WHERE c.relname ~ '^idem_keys_[0-9]+$'"
                " AND c.relkind = 'r'").fetchall()]
            bad = w.execute("SELECT count(*) FROM unnest(%s::regclass[]) AS t(rel), verify_heapam(t.rel)",
                            (names,)).fetchone()[0]
            indexes = w.execute("SELECT i.indexrelid::regclass::text FROM pg_index AS i"
                                " JOIN pg_class AS c ON c.oid = i.indexrelid JOIN pg_am AS a ON a.oid = c.relam"
                                " WHERE i.indrelid = ANY (%s::regclass[]) AND a.amname = 'btree'", (names,)).fetchall()
            for (index,) in indexes:
                w.execute("SELECT bt_index_check(%s::regclass, true)", (index,))
            rows = sum(w.execute(f"SELECT count(*) FROM {name}").fetchone()[0] for name in names)
            # Each row in the shard Citus places its scope in (the direct path hashes the scope itself).
            astray = sum(w.execute(f"SELECT count(*) FROM {name} WHERE get_shard_id_for_distribution_column("
                                   "'idem_keys', scope) <> %s", (int(name.rsplit('_', 1)[1]),)).fetchone()[0]
                         for name in names)
            check(f"every row on {w.info.port} is in the shard of its scope", rows > 0 and astray == 0, astray)
            check(f"amcheck: the shards on {w.info.port} are sound ({len(names)} shards, {len(indexes)} btree"
                  f" indexes, {rows} rows)", len(names) > 0 and bad == 0 and len(indexes) >= len(names), (names, bad))


def direct_on_the_shard():
    """On the scope's worker a call outside a transaction block writes and reads the shard directly (no
    statement through Citus's planner); inside one it leaves the shard to Citus's statements. Both answer the
    same, and the rows land in the same shard."""
    shard, port = placement("shop")
    with connect(worker_at(port)) as w:
        notices = []
        w.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        w.execute("SET client_min_messages = debug1")
        got = claim(w, key("direct"))
        declined = [n for n in notices if "direct path declined" in n]
        check("on the scope's worker, outside a transaction block: the direct path writes the shard",
              got[0] == "claimed" and not declined and rows_in_shard("shop", key("direct")) == 1, (got, declined))
        w.execute(FINISH, ("shop", key("direct"), got[1], 201, ANSWER, None))
        notices.clear()
        replay = claim(w, key("direct"))
        check("on the scope's worker: the replay is read from the shard directly",
              replay[0] == "replay" and bytes(replay[4]) == ANSWER
              and not any("direct path declined" in n for n in notices), (replay[0], notices))
        w.execute("BEGIN")
        notices.clear()
        got = claim(w, key("direct-block"))
        w.execute("COMMIT")
        check("inside a transaction block: Citus's statements write the shard (the direct path declines)",
              got[0] == "claimed" and any("declined (Elsewhere)" in n for n in notices)
              and rows_in_shard("shop", key("direct-block")) == 1, (got, notices[-3:]))


def cap_app_answers(on):
    """idem_keys.max_response_bytes at 1 kB for idem_app (on) or back to the default: for the role in the
    extension (Citus carries ALTER ROLE … SET to every node), on every node in the portable edition."""
    if EDITION == "extension":
        sql = ("ALTER ROLE idem_app SET idem_keys.max_response_bytes = '1kB'" if on
               else "ALTER ROLE idem_app RESET idem_keys.max_response_bytes")
    else:
        sql = ("SELECT run_command_on_all_nodes($$SELECT idem_keys_configure('idem_keys.max_response_bytes', "
               + ("'1024'" if on else "NULL") + ")$$)")
    with connect() as c:
        c.execute(sql)


def settings():
    """idem_keys's settings apply where the call runs, the worker: set for the role or on every node, they hold;
    a session SET on the coordinator stays there."""
    big = b"x" * 2000
    cap_app_answers(True)
    try:
        with connect(APP) as a:
            t = claim(a, key("capped"))[1]
            got = sqlstate(a, FINISH, ("shop", key("capped"), t, 200, big, None))
            again = claim(a, key("capped"))[0]
        check("a size cap set for the role (or on every node) holds on the worker: 54000, nothing stored",
              got == "54000" and again == "in_progress", (got, again))
    finally:
        cap_app_answers(False)
    if EDITION == "extension":  # the portable edition's settings are not GUCs
        with connect() as a:  # a superuser's session: the cap is not the application's to set
            a.execute("SET idem_keys.max_response_bytes = '1kB'")
            t = claim(a, key("session-cap"))[1]
            got = sqlstate(a, FINISH, ("shop", key("session-cap"), t, 200, big, None))
        check("a session SET on the coordinator does not reach the delegated call (the worker's cap applies)",
              got == "", got)


def nologin_role():
    """Citus opens a delegated call's connection to the worker as the current role: under SET ROLE to a role that
    may not log in, the call fails with 08006 saying so (docs/errors.md), and nothing is written."""
    with connect() as c:
        c.execute("DO $$ BEGIN CREATE ROLE idem_nologin NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        c.execute("SET ROLE idem_nologin")
        got = error_of(c, CLAIM, ("shop", key("nologin"), BODY, None, None))
        c.execute("RESET ROLE")
    check("a call under SET ROLE to a NOLOGIN role: 08006, the message says the role may not log in",
          got is not None and got[0] == "08006" and "not permitted to log in" in got[1]
          and rows_in_shard("shop", key("nologin")) == 0, got)


def errors():
    """Every SQLSTATE of docs/errors.md that a call through the coordinator can meet, raised on the worker."""
    r = connect()
    cases = [
        ("22004", "a NULL key", CLAIM, ("shop", None, BODY, None, None)),
        ("22004", "a NULL scope", CLAIM, (None, key("x"), BODY, None, None)),
        ("22023", "an empty key", CLAIM, ("shop", "", BODY, None, None)),
        ("22023", "a key over 255 characters", CLAIM, ("shop", "k" * 256, BODY, None, None)),
        ("22023", "a status code out of range", FINISH, ("shop", key("x"), 1, 700, b"", None)),
        ("22023", "a negative wait", CLAIM, ("shop", key("neg"), BODY, None, "-1 second")),
        ("22023", "a lease of zero", CLAIM, ("shop", key("zero"), BODY, "0 seconds", None)),
        ("22023", "headers that are not an object", FINISH, ("shop", key("x"), 1, 200, b"", "[1]")),
        ("54000", "an answer over max_response_bytes",
         "SELECT idem_finish('shop', %s, 1, 200, repeat('x', 2000000)::bytea)", (key("big"),)),
        ("P0002", "a finish of a key never claimed", FINISH, ("shop", key("never-claimed"), 1, 200, b"", None)),
        ("P0002", "a release of a key never claimed", "SELECT idem_release('shop', %s, 1)", (key("never-claimed"),)),
        ("22023", "idem_stale(max_rows => 0)", "SELECT * FROM idem_stale(max_rows => 0)", ()),
        ("22004", "idem_stale(max_rows => NULL)", "SELECT * FROM idem_stale(max_rows => NULL)", ()),
    ]
    for state, name, sql, params in cases:
        got = error_of(r, sql, params)
        check(f"error {state} {name}: the SQLSTATE, with a message", got is not None and got[0] == state and got[1],
              got)
    check("nothing of the refused calls was written",
          rows_in_shard("shop", key("x")) + rows_in_shard("shop", key("neg")) + rows_in_shard("shop", key("zero")) == 0)
    owner = claim(r, key("owned"), lease="1 minute")
    check("error 55000 a token that does not own the key",
          sqlstate(r, FINISH, ("shop", key("owned"), owner[1] + 1000, 200, b"", None)) == "55000")
    r.execute(FINISH, ("shop", key("owned"), owner[1], 200, b"one", None))
    check("error 55000 a second finish with another answer",
          sqlstate(r, FINISH, ("shop", key("owned"), owner[1], 200, b"two", None)) == "55000")
    busy = claim(r, key("slow"), lease="1 minute")
    with connect() as c:
        c.execute("SET statement_timeout = '500ms'")
        start = time.monotonic()
        got = error_of(c, CLAIM, ("shop", key("slow"), BODY, None, "30 seconds"))
        took = time.monotonic() - start
    check("error 57014 statement_timeout while idem_claim waits on a worker", got is not None and got[0] == "57014"
          and took < 5, (got, took))
    r.execute(FINISH, ("shop", key("slow"), busy[1], 200, b"", None))
    with connect(APP) as app:
        for verb in ("SELECT idem_stats()", "SELECT idem_sweep()", "SELECT * FROM idem_stale()"):
            check(f"error 42501 {verb} as an application role", sqlstate(app, verb) == "42501")
        check("error 42501 the table itself as an application role",
              sqlstate(app, "SELECT count(*) FROM idem_keys") == "42501")
    r.close()


def race():
    """Twelve clients claim one key at once through the coordinator: one claims, the others see it in
    progress; the winner's answer replays to all of them afterwards."""
    k = key("race")
    barrier = threading.Barrier(12)
    results = []

    def contender():
        with connect(APP) as c:
            barrier.wait(10)
            results.append(claim(c, k, lease="1 minute"))

    threads = [threading.Thread(target=contender) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    outcomes = sorted(r[0] for r in results)
    check("12-way race: one claimed, eleven in_progress",
          outcomes == ["claimed"] + ["in_progress"] * 11, outcomes)
    winner = next((r for r in results if r[0] == "claimed"), None)
    if winner:
        with connect(APP) as c:
            c.execute(FINISH, ("shop", k, winner[1], 200, b"won", None))
            check("12-way race: the winner's answer replays", bytes(claim(c, k)[4]) == b"won")


def spread_and_fan_out():
    """Scopes land on both workers; idem_stats and idem_stale see every shard."""
    r = connect()
    scopes = [f"{RUN}-tenant-{i}" for i in range(16)]
    ports = {s: placement(s)[1] for s in scopes}
    check("scopes spread over both workers", len(set(ports.values())) == 2, ports)
    for s in scopes:
        r.execute(CLAIM, (s, key("stale"), BODY, "1 millisecond", None))
    time.sleep(0.05)
    total = 0
    for url in WORKERS:
        with connect(url) as w:
            w.execute("SET citus.override_table_visibility = off")
            for (shard,) in w.execute("SELECT c.oid::regclass::text FROM pg_class AS c"
                                      " WHERE c.relname ~ '^idem_keys_[0-9]+$' AND c.relkind = 'r'").fetchall():
                total += w.execute(f"SELECT count(*) FROM {shard} WHERE finished_at IS NULL").fetchone()[0]
    stats = r.execute("SELECT in_progress + stale FROM idem_stats()").fetchone()[0]
    check("idem_stats counts the claims of every shard", stats == total, (stats, total))
    stale = r.execute("SELECT scope FROM idem_stale(max_rows => 1000) WHERE key = %s", (key("stale"),)).fetchall()
    check("idem_stale lists the stale claims of every shard", sorted(s for (s,) in stale) == sorted(scopes),
          len(stale))


def binding():
    """Tenant binding (role) set for the role on every node: a tenant's call of another tenant's scope is
    refused on the worker that would hold it, and nothing is written."""
    with connect() as c:
        c.execute("DO $$ BEGIN CREATE ROLE acme LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        if EDITION == "extension":
            c.execute("ALTER ROLE acme SET idem_keys.tenant_binding = 'role'")
        else:
            # The portable edition's settings are a table on each node: configured on every node.
            done = c.execute("SELECT bool_and(success) FROM run_command_on_all_nodes("
                             "$$SELECT idem_keys_configure('idem_keys.tenant_binding', 'role')$$)").fetchone()[0]
            check("binding: configured on every node", done is True)
    url = APP.replace("user=idem_app", "user=acme")
    with connect(url) as r:
        own = claim(r, key("bound"), scope="acme:POST /payments")
        check("binding: a tenant claims its own scope", own[0] == "claimed", own)
        for name, sql, params in [
            ("claim", CLAIM, ("globex:POST /payments", key("foreign"), BODY, None, None)),
            ("lookup", "SELECT idem_lookup(%s, %s)", ("globex:POST /payments", key("foreign"))),
            ("finish", FINISH, ("globex:POST /payments", key("foreign"), own[1], 200, b"", None)),
            ("release", "SELECT idem_release(%s, %s, %s)", ("globex:POST /payments", key("foreign"), own[1])),
            ("checkpoint", "SELECT idem_checkpoint(%s, %s, %s, 'charged')", ("globex", key("foreign"), own[1])),
        ]:
            check(f"binding: idem_{name} of another tenant's scope is 42501",
                  sqlstate(r, sql, params) == "42501")
    check("binding: nothing of the refused calls was written", rows_in_shard("globex:POST /payments", key("foreign")) == 0)

    # Binding by a setting: a delegated call runs in the worker's session, which a session SET does not reach,
    # so it is refused (fails closed); the tenant set per transaction (SET LOCAL, as the HINT says) keeps the
    # call on the coordinator, where the setting is, and it is served.
    with connect() as c:
        if EDITION == "extension":
            c.execute("ALTER ROLE acme SET idem_keys.tenant_binding = 'setting'")
            c.execute("ALTER ROLE acme SET idem_keys.tenant_setting = 'app.tenant'")
        else:
            c.execute("SELECT run_command_on_all_nodes($$SELECT idem_keys_configure('idem_keys.tenant_binding', 'setting'),"
                      " idem_keys_configure('idem_keys.tenant_setting', 'app.tenant')$$)")
    with connect(url) as r:
        r.execute("SET app.tenant = 'acme'")
        check("binding by a setting: a session SET does not reach the worker, the call is refused (42501)",
              sqlstate(r, CLAIM, ("acme:POST /payments", key("session"), BODY, None, None)) == "42501")
    with psycopg.connect(url) as r:  # one transaction
        r.execute("SET LOCAL app.tenant = 'acme'")
        got = claim(r, key("local"), scope="acme:POST /payments")
        check("binding by a setting: SET LOCAL in the transaction, the call is served", got[0] == "claimed", got)
        r.commit()
    with connect() as c:
        if EDITION == "extension":
            c.execute("ALTER ROLE acme RESET ALL")
        else:
            c.execute("SELECT run_command_on_all_nodes($$SELECT idem_keys_configure('idem_keys.tenant_binding', NULL),"
                      " idem_keys_configure('idem_keys.tenant_setting', NULL)$$)")


contract()
one_hop()
if EDITION == "extension":  # the portable edition has no direct path
    direct_on_the_shard()
errors()
settings()
nologin_role()
race()
spread_and_fan_out()
binding()
shards()
checks.exit(f"citus checks ({EDITION})")
