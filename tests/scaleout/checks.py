"""idem_keys through a PL/Proxy router (idem_keys_proxy) with 4 partitions, run by tests/scaleout/run.sh: the
contract, where keys land, every SQLSTATE of docs/errors.md that a router can meet, the fan-out verbs against
the partitions' own answers, the security model and tenant binding on the router. Prints one line per check; exits 1 if any failed.

Usage: checks.py ROUTER_URL APP_URL PARTITION_URL...
  ROUTER_URL      the router's database as its owner (a superuser)
  APP_URL         the router's database as an application role with nothing granted
  PARTITION_URL   each partition's database as a superuser (for the checks' own look at what is there), in
                  partition order
"""
import pathlib
import sys
import threading
import time
import uuid

import psycopg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from checklist import Checklist, error_of  # noqa: E402 (after the path it is found on)

ROUTER, APP, PARTS = sys.argv[1], sys.argv[2], sys.argv[3:]
RUN = uuid.uuid4().hex[:8]
CLAIM = """SELECT (r).outcome, (r).token, (r).attempt, (r).status_code, (r).response_bytes, (r).headers::text,
                  (r).retry_after, (r).checkpoint
             FROM (SELECT idem_claim(%s, %s, %s::jsonb, lease => %s::interval, wait => %s::interval) AS r) s"""
FINISH = "SELECT idem_finish(%s, %s, %s, %s, %s::bytea, headers => %s::jsonb)"
BODY = '{"amount": 1000, "currency": "EUR"}'
ANSWER = b'{"charge_id":"ch_1", "amount":1000}'
checks = Checklist()
check = checks.check


def connect(url=ROUTER):
    return psycopg.connect(url, autocommit=True)


def key(name):
    return f"{RUN}-{name}"


def claim(conn, k, body=BODY, lease=None, wait=None, scope="shard"):
    return conn.execute(CLAIM, (scope, k, body, lease, wait)).fetchone()


def home(k, scope="shard"):
    """The partition that holds (scope, k), found by asking each one."""
    found = []
    for i, url in enumerate(PARTS):
        with connect(url) as p:
            if p.execute("SELECT 1 FROM idem_keys WHERE scope = %s AND key = %s", (scope, k)).fetchone():
                found.append(i)
    return found


def contract():
    a, b = connect(APP), connect(APP)
    first = claim(a, key("pay"))
    check("claimed: token and attempt 1", first[0] == "claimed" and first[1] and first[2] == 1, first)
    a.execute(FINISH, ("shard", key("pay"), first[1], 201, ANSWER, '{"Location": "/ch_1"}'))
    again = claim(b, key("pay"))
    check("replay: status, body byte for byte, headers",
          again[0] == "replay" and again[3] == 201 and bytes(again[4]) == ANSWER
          and again[5] == '{"Location": "/ch_1"}', again)
    check("mismatch", claim(b, key("pay"), '{"amount": 9999}')[0] == "mismatch")
    check("the key is on exactly one partition", len(home(key("pay"))) == 1, home(key("pay")))

    busy = claim(a, key("busy"), lease="1 minute")
    seen = claim(b, key("busy"))
    check("in_progress with retry_after", busy[0] == "claimed" and seen[0] == "in_progress" and seen[6] >= 1, seen)

    short = claim(a, key("lapsed"), lease="1 second")
    a.execute("SELECT idem_checkpoint('shard', %s, %s, 'charged', '{\"charge\": \"ch_9\"}')", (key("lapsed"), short[1]))
    time.sleep(1.2)
    recovered = claim(b, key("lapsed"))
    check("recovered after a short lease: attempt 2, a new token, the checkpoint",
          recovered[0] == "recovered" and recovered[2] == 2 and recovered[1] > short[1]
          and recovered[7] == "charged", recovered)
    check("the dead owner's finish is refused (55000)",
          (error_of(a, FINISH, ("shard", key("lapsed"), short[1], 200, b"{}", None)) or ("",))[0] == "55000")

    gone = claim(a, key("released"))
    released = a.execute("SELECT idem_release('shard', %s, %s)", (key("released"), gone[1])).fetchone()[0]
    check("release, then the key is claimed afresh",
          released is True and claim(b, key("released"))[0] == "claimed")

    looked = a.execute("SELECT (r).outcome, (r).response_bytes FROM (SELECT idem_lookup('shard', %s) AS r) s",
                       (key("pay"),)).fetchone()
    check("idem_lookup replays", looked[0] == "replay" and bytes(looked[1]) == ANSWER, looked)
    # ::text: a row of NULLs IS NULL too, and is not what one node answers.
    check("idem_lookup of an unknown key is NULL, not a row of NULLs",
          a.execute("SELECT idem_lookup('shard', %s)::text", (key("never"),)).fetchone()[0] is None)

    with connect(PARTS[0]) as p:
        mine = p.execute("SELECT idem_fingerprint(%s::jsonb)", (BODY,)).fetchone()[0]
    check("idem_fingerprint is a partition's",
          a.execute("SELECT idem_fingerprint(%s::jsonb)", (BODY,)).fetchone()[0] == mine)

    # wait: a second claim waits for the owner's finish and gets the replay.
    owner = claim(a, key("wait"), lease="1 minute")
    got = {}

    def waiter():
        with connect(APP) as c:
            got["r"] = claim(c, key("wait"), wait="10 seconds")

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.5)
    a.execute(FINISH, ("shard", key("wait"), owner[1], 200, b"done", None))
    t.join(15)
    check("wait: a waiting claim gets the replay when the owner finishes",
          got.get("r", [None])[0] == "replay" and bytes(got["r"][4]) == b"done", got)


def spread():
    with connect() as r:
        for i in range(400):
            r.execute(CLAIM, ("big-merchant", key(f"s{i}"), BODY, None, None))
    counts = []
    for url in PARTS:
        with connect(url) as p:
            counts.append(p.execute("SELECT count(*) FROM idem_keys WHERE scope = 'big-merchant' AND key LIKE %s",
                                    (f"{RUN}-%",)).fetchone()[0])
    check("one large scope spreads over every partition (400 keys: 60 to 140 each)",
          sum(counts) == 400 and all(60 <= c <= 140 for c in counts), counts)
    print(f"      400 keys of one scope per partition: {counts}")


def errors():
    """Every row of docs/errors.md that a router can meet: the SQLSTATE and the texts one node gives."""
    r, node = connect(), connect(PARTS[0])
    cases = [
        ("22004 a NULL key", CLAIM, ("shard", None, BODY, None, None)),
        ("22023 an empty key", CLAIM, ("shard", "", BODY, None, None)),
        ("22023 a status code out of range", FINISH, ("shard", key("x"), 1, 700, b"", None)),
        ("22023 a negative wait", CLAIM, ("shard", key("neg"), BODY, None, "-1 second")),
        ("54000 an answer over max_response_bytes",
         "SELECT idem_finish('shard', %s, 1, 200, repeat('x', 2000000)::bytea)", (key("big"),)),
        ("P0002 a finish of a key never claimed", FINISH, ("shard", key("never-claimed"), 1, 200, b"", None)),
        ("22023 idem_stale(max_rows => 0)", "SELECT * FROM idem_stale(max_rows => 0)", ()),
        ("22004 idem_stale(max_rows => NULL)", "SELECT * FROM idem_stale(max_rows => NULL)", ()),
    ]
    for name, sql, params in cases:
        routed, direct = error_of(r, sql, params), error_of(node, sql, params)
        check(f"error {name}: as one node (SQLSTATE, message, detail, hint)",
              routed is not None and routed == direct and routed[0] == name[:5], (routed, direct))
    # 55000: a token that does not own the key; a second, different finish.
    owner = claim(r, key("owned"), lease="1 minute")
    check("error 55000 a token that does not own the key",
          (error_of(r, FINISH, ("shard", key("owned"), owner[1] + 1000, 200, b"", None)) or ("",))[0] == "55000")
    r.execute(FINISH, ("shard", key("owned"), owner[1], 200, b"one", None))
    check("error 55000 a second finish with another answer",
          (error_of(r, FINISH, ("shard", key("owned"), owner[1], 200, b"two", None)) or ("",))[0] == "55000")
    # 57014: the router's statement_timeout ends a claim that waits on a partition.
    busy = claim(r, key("slow"), lease="1 minute")
    with connect() as c:
        c.execute("SET statement_timeout = '500ms'")
        start = time.monotonic()
        got = error_of(c, CLAIM, ("shard", key("slow"), BODY, None, "30 seconds"))
        took = time.monotonic() - start
    check("error 57014 statement_timeout while idem_claim waits", got is not None and got[0] == "57014"
          and took < 5, (got, took))
    r.execute(FINISH, ("shard", key("slow"), busy[1], 200, b"", None))
    # 42501: the admin verbs without a grant.
    with connect(APP) as app:
        for verb in ("SELECT idem_stats()", "SELECT idem_sweep()", "SELECT * FROM idem_stale()",
                     "SELECT * FROM idem_sweep_status()", "SELECT * FROM idem_cluster_status()"):
            check(f"error 42501 {verb} as an application role", (error_of(app, verb) or ("",))[0] == "42501")
        check("error 42501 the internals as an application role",
              (error_of(app, "SELECT idem_keys_proxy.remote_lookup('shard', 'x')") or ("",))[0] == "42501")


def fan_out():
    r = connect()
    # Two expired answers and one stale claim on each partition (keys chosen by where they land).
    placed = {i: [] for i in range(len(PARTS))}
    n = 0
    while any(len(v) < 3 for v in placed.values()) and n < 2000:
        k = key(f"f{n}")
        n += 1
        part = r.execute("SELECT (idem_keys_proxy.route('fan', %s)::bigint & %s)::int", (k, len(PARTS) - 1)).fetchone()[0]
        if len(placed[part]) < 3:
            placed[part].append(k)
    for part, ks in placed.items():
        for k in ks[:2]:
            t = r.execute(CLAIM, ("fan", k, BODY, None, None)).fetchone()[1]
            r.execute("SELECT idem_finish('fan', %s, %s, 200, ''::bytea, retention => '1 millisecond')", (k, t))
        r.execute(CLAIM, ("fan", ks[2], BODY, "1 millisecond", None))
    for part, ks in placed.items():
        check(f"route() names the partition a key lands on (partition {part})",
              all(home(k, "fan") == [part] for k in ks), [home(k, "fan") for k in ks])
    time.sleep(0.05)
    totals = [0, 0, 0, 0]
    oldest = []
    for url in PARTS:
        with connect(url) as p:
            s = p.execute("SELECT in_progress, stale, finished, expired, oldest_in_progress_age FROM idem_stats()").fetchone()
            totals = [t + v for t, v in zip(totals, s[:4])]
            oldest.append(s[4])
    got = r.execute("SELECT in_progress, stale, finished, expired, oldest_in_progress_age FROM idem_stats()").fetchone()
    check("idem_stats sums the partitions' counts", list(got[:4]) == totals, (got, totals))
    check("idem_stats: the oldest age is the maximum over partitions",
          got[4] is not None and got[4] >= max(o for o in oldest if o is not None))
    stale = r.execute("SELECT scope, key, lease_ends_at FROM idem_stale(max_rows => 3) WHERE true").fetchall()
    every = []
    for url in PARTS:
        with connect(url) as p:
            every += p.execute("SELECT scope, key, lease_ends_at FROM idem_stale(max_rows => 1000)").fetchall()
    every.sort(key=lambda row: (row[2], row[0], row[1]))
    check("idem_stale: at most max_rows overall, the oldest lease ends across partitions",
          stale == every[:3], (stale, every[:3]))
    expired = 2 * len(PARTS)
    removed = r.execute("SELECT idem_sweep()").fetchone()[0]
    check("idem_sweep returns the total removed over partitions", removed >= expired, (removed, expired))
    status = r.execute("SELECT partition FROM idem_sweep_status() ORDER BY 1").fetchall()
    check("idem_sweep_status: a row per partition, with its number",
          [s[0] for s in status] == list(range(len(PARTS))), status)


def binding():
    """Tenant binding on the router: the router checks the caller (a partition only ever sees the router's
    role), with the node's code, so a foreign scope is refused as one node refuses it and never routed."""
    for url in (ROUTER, PARTS[0]):
        with connect(url) as c:
            c.execute("DO $$ BEGIN CREATE ROLE acme; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    sessions = []
    for url in (ROUTER, PARTS[0]):
        c = connect(url)
        c.execute("SET idem_keys.tenant_binding = 'role'")
        c.execute("SET ROLE acme")
        sessions.append(c)
    r, node = sessions
    own = claim(r, key("bound"), scope="acme:POST /payments")
    check("binding: a tenant claims its own scope through the router", own[0] == "claimed", own)
    for name, sql, params in [
        ("claim", CLAIM, ("globex:POST /payments", key("foreign"), BODY, None, None)),
        ("lookup", "SELECT idem_lookup(%s, %s)", ("globex:POST /payments", key("foreign"))),
        ("finish", FINISH, ("globex:POST /payments", key("foreign"), own[1], 200, b"", None)),
        ("release", "SELECT idem_release(%s, %s, %s)", ("globex:POST /payments", key("foreign"), own[1])),
        ("checkpoint", "SELECT idem_checkpoint(%s, %s, %s, 'charged')", ("globex", key("foreign"), own[1])),
    ]:
        routed, direct = error_of(r, sql, params), error_of(node, sql, params)
        check(f"binding: idem_{name} of another tenant's scope is 42501 through the router, as on one node",
              routed is not None and routed[0] == "42501" and routed == direct, (routed, direct))
    check("binding: nothing of the refused calls reached a partition", home(key("foreign"), "globex:POST /payments") == [])
    for c in sessions:
        c.close()


def operator():
    r = connect()
    rows = r.execute("SELECT partition, reachable, version, keys FROM idem_cluster_status() ORDER BY 1").fetchall()
    counts = []
    for url in PARTS:
        with connect(url) as p:
            counts.append(p.execute("SELECT count(*) FROM idem_keys").fetchone()[0])
    with connect() as r:
        mine = r.execute("SELECT extversion FROM pg_extension WHERE extname = 'idem_keys_proxy'").fetchone()[0]
    check(f"idem_cluster_status: every partition reachable, on {mine}, with its key count",
          [(p, True, mine, c) for p, c in enumerate(counts)] == [tuple(x) for x in rows], (rows, counts))


def security():
    with connect(APP) as app:
        check("an application role can call the API", claim(app, key("sec"))[0] == "claimed")
        check("an application role has no user mapping and no USAGE on the server, and needs neither",
              app.execute("SELECT has_server_privilege('idem_keys_cluster', 'USAGE')").fetchone()[0] is False)
        check("an application role cannot read the user mapping's options",
              app.execute("SELECT count(*) FROM pg_user_mappings WHERE srvname = 'idem_keys_cluster'"
                          " AND umoptions IS NOT NULL").fetchone()[0] == 0)


contract()
spread()
errors()
fan_out()
binding()
operator()
security()
checks.exit("scaleout checks")
