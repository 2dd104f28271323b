"""idem_keys on Citus, run by tests/citus/run.sh after checks.py: the sweep on every worker (called, by the
background worker, by pg_cron), the token ranges, and a worker stopped and restarted. Prints one line per check;
exits 1 if any failed.

Usage: faults.py EDITION CLUSTER_DIR COORDINATOR_PORT
  CLUSTER_DIR       what scripts/citus.sh start made (coordinator/, worker1/, worker2/)
  COORDINATOR_PORT  the workers listen on the next two ports
"""
import pathlib
import subprocess
import sys
import time

import psycopg

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from checklist import Checklist, error_of  # noqa: E402 (after the path it is found on)

EDITION, DIR, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
WORKER_PORTS = [PORT + 1, PORT + 2]
checks = Checklist(EDITION)
check = checks.check


def connect(port=PORT, user="postgres"):
    return psycopg.connect(host="127.0.0.1", port=port, dbname="idem", user=user, autocommit=True)


def scopes_by_worker(prefix):
    """For each worker port, one scope whose shard it holds."""
    with connect() as c:
        rows = c.execute(
            """SELECT DISTINCT ON (p.nodeport) p.nodeport, s
                 FROM (SELECT %s || i AS s FROM generate_series(1, 64) AS i) AS candidates,
                      LATERAL (SELECT nodeport FROM pg_dist_shard_placement
                                WHERE shardid = get_shard_id_for_distribution_column('idem_keys', s)) AS p
                ORDER BY p.nodeport, s""", (prefix,)).fetchall()
    return {port: scope for port, scope in rows}


def finish_new(conn, scope, key, body=b"", retention=None):
    token = conn.execute("SELECT (idem_claim(%s, %s, '{}'::jsonb)).token", (scope, key)).fetchone()[0]
    conn.execute("SELECT idem_finish(%s, %s, %s, 201, %s::bytea, retention => %s::interval)",
                 (scope, key, token, body, retention))


def seed_expired(prefix):
    """Three answers already past their retention and one kept, in a scope on each worker."""
    placed = scopes_by_worker(prefix)
    with connect() as c:
        for scope in placed.values():
            for k in range(3):
                finish_new(c, scope, f"k{k}", retention="1 millisecond")
            finish_new(c, scope, "kept")
    return placed


def expired_now():
    with connect() as c:
        return c.execute("SELECT expired FROM idem_stats()").fetchone()[0]


def check_kept(placed, how):
    """The answers still in retention replay after a sweep."""
    with connect() as c:
        kept = [c.execute("SELECT (idem_claim(%s, 'kept', '{}'::jsonb)).outcome", (s,)).fetchone()[0]
                for s in placed.values()]
    check(f"{how}: the answers still in retention replay", kept == ["replay"] * len(kept), kept)


def sweep():
    """Each worker's own sweep (what its background worker or pg_cron runs there) removes the expired answers
    of the shards it holds, and only those."""
    placed = seed_expired("sweep-")
    check("sweep: scopes on both workers", sorted(placed) == WORKER_PORTS, placed)
    time.sleep(0.05)
    before = expired_now()
    check("sweep: idem_stats counts the expired answers of both workers", before >= 6, before)
    with connect() as c:
        refused = error_of(c, "SELECT idem_sweep()")
    check("sweep: idem_sweep() on the coordinator, which holds no rows, is refused with 0A000 and what to run",
          refused is not None and refused[0] == "0A000" and "run_command_on_workers" in (refused[3] or ""), refused)
    check("sweep: the refused sweep removed nothing", expired_now() == before, expired_now())
    for port in WORKER_PORTS:
        with connect(port) as w:
            removed = w.execute("SELECT idem_sweep()").fetchone()[0]
        check(f"sweep: the sweep on the worker at {port} removes the expired answers it holds", removed >= 3, removed)
    after = expired_now()
    check("sweep: no expired answer left after both workers swept", after == 0, after)
    check_kept(placed, "sweep")


def until(seconds, probe):
    """Polls `probe` every 0.2 s until it returns true or `seconds` pass; its last value."""
    deadline = time.monotonic() + seconds
    while True:
        got = probe()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def swept_unattended(placed, how):
    """Waits (bounded) for the expired answers to go with nobody calling idem_sweep(), then checks the kept ones."""
    gone = until(30, lambda: expired_now() == 0)
    check(f"sweep by {how} on every worker: the expired answers of both workers are gone", gone, expired_now())
    check_kept(placed, f"sweep by {how}")


def background_sweep():
    """The extension's background worker on each worker (idem_keys.sweep_databases names the database; run.sh
    starts the nodes with it off and a 1 s interval) sweeps the shards that worker holds."""
    placed = seed_expired("bgw-")
    for port in WORKER_PORTS:
        with connect(port) as w:
            w.execute("ALTER SYSTEM SET idem_keys.sweep_enabled = on")
            w.execute("SELECT pg_reload_conf()")
    try:
        swept_unattended(placed, "the background worker")
    finally:
        for port in WORKER_PORTS:
            with connect(port) as w:
                w.execute("ALTER SYSTEM RESET idem_keys.sweep_enabled")
                w.execute("SELECT pg_reload_conf()")


def cron_sweep():
    """pg_cron on each worker (preloaded by run.sh, cron.database_name = 'idem') runs idem_sweep() there."""
    placed = seed_expired("cron-")
    for port in WORKER_PORTS:
        with connect(port) as w:
            w.execute("SET citus.enable_ddl_propagation = off")  # pg_cron is each node's own
            w.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
            w.execute("SELECT cron.schedule('idem-sweep', '1 second', 'SELECT idem_sweep()')")
    try:
        swept_unattended(placed, "pg_cron")
        for port in WORKER_PORTS:
            with connect(port) as w:
                runs = w.execute("SELECT count(*) FROM cron.job_run_details WHERE status = 'succeeded'").fetchone()[0]
            check(f"sweep by pg_cron: its job succeeded on the worker at {port}", runs > 0, runs)
    finally:
        for port in WORKER_PORTS:
            with connect(port) as w:
                w.execute("SELECT cron.unschedule('idem-sweep')")


def token_ranges():
    """Each node hands out tokens from a range of its own (2^48 wide, named by its group), so a shard that
    moves keeps its fencing: no takeover on the new worker can get an old owner's token."""
    with connect() as c:
        rows = c.execute("""SELECT n.nodeport, r.result FROM run_command_on_all_nodes(
                              $$SELECT (SELECT last_value >> 48 FROM idem_keys_token_seq)
                                        = (SELECT groupid FROM pg_dist_local_group)$$) AS r
                              JOIN pg_dist_node AS n USING (nodeid)""").fetchall()
    check("token ranges: every node's sequence is in its own group's range",
          len(rows) == 3 and all(r[1] == "t" for r in rows), rows)


def worker_down():
    placed = scopes_by_worker("down-")
    up, down = placed[WORKER_PORTS[0]], placed[WORKER_PORTS[1]]
    with connect() as c:
        finish_new(c, down, "kept", b"kept")
    subprocess.run(["bash", "scripts/cluster.sh", "stop", f"{DIR}/worker2"], check=True)
    try:
        with connect(user="idem_app") as app:
            try:
                app.execute("SELECT idem_claim(%s, 'while-down', '{}'::jsonb)", (down,))
                check("worker down: a claim of its scope fails", False, "it succeeded")
            except psycopg.Error as e:
                check("worker down: a claim of its scope fails with 08006, naming the worker",
                      e.sqlstate == "08006" and f"127.0.0.1:{WORKER_PORTS[1]}" in str(e), (e.sqlstate, str(e)))
            start = time.monotonic()
            served = app.execute("SELECT (idem_claim(%s, 'while-down', '{}'::jsonb)).outcome", (up,)).fetchone()[0]
            check("worker down: the other worker's scopes are served, at once",
                  served == "claimed" and time.monotonic() - start < 2, served)
    finally:
        subprocess.run(["bash", "scripts/cluster.sh", "start", f"{DIR}/worker2", str(WORKER_PORTS[1])], check=True)
    with connect(user="idem_app") as app:
        r = app.execute("SELECT (r).outcome, (r).status_code, (r).response_bytes"
                        " FROM (SELECT idem_claim(%s, 'kept', '{}'::jsonb) AS r) AS c", (down,)).fetchone()
        check("worker down: restarted, the answer it held replays byte for byte",
              r[0] == "replay" and r[1] == 201 and bytes(r[2]) == b"kept", r)
        again = app.execute("SELECT (idem_claim(%s, 'while-down', '{}'::jsonb)).outcome", (down,)).fetchone()[0]
        check("worker down: the refused claim wrote nothing (the key is new now)", again == "claimed", again)


sweep()
if EDITION == "extension":  # the portable edition has no background worker
    background_sweep()
cron_sweep()
token_ranges()
worker_down()
checks.exit(f"citus faults ({EDITION})")
