"""idem_keys on Citus, run by tests/citus/run.sh after checks.py: the sweep on every worker, the token ranges,
and a worker stopped and restarted. Prints one line per check; exits 1 if any failed.

Usage: faults.py EDITION CLUSTER_DIR COORDINATOR_PORT
  CLUSTER_DIR       what scripts/citus.sh start made (coordinator/, worker1/, worker2/)
  COORDINATOR_PORT  the workers listen on the next two ports
"""
import subprocess
import sys
import time

import psycopg

EDITION, DIR, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
WORKER_PORTS = [PORT + 1, PORT + 2]
failures = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'}  [{EDITION}] {name}" + (f": {detail}" if detail and not ok else ""))
    if not ok:
        failures.append(name)


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


def sweep():
    """Each worker's own sweep (what its background worker or pg_cron runs there) removes the expired answers
    of the shards it holds, and only those."""
    placed = scopes_by_worker("sweep-")
    check("sweep: scopes on both workers", sorted(placed) == WORKER_PORTS, placed)
    with connect() as c:
        for scope in placed.values():
            for k in range(3):
                finish_new(c, scope, f"k{k}", retention="1 millisecond")
            finish_new(c, scope, "kept")
        time.sleep(0.05)
        before = c.execute("SELECT expired FROM idem_stats()").fetchone()[0]
    check("sweep: idem_stats counts the expired answers of both workers", before >= 6, before)
    for port in WORKER_PORTS:
        with connect(port) as w:
            removed = w.execute("SELECT idem_sweep()").fetchone()[0]
        check(f"sweep: the sweep on the worker at {port} removes the expired answers it holds", removed >= 3, removed)
    with connect() as c:
        after = c.execute("SELECT expired FROM idem_stats()").fetchone()[0]
        check("sweep: no expired answer left after both workers swept", after == 0, after)
        kept = [c.execute("SELECT (idem_claim(%s, 'kept', '{}'::jsonb)).outcome", (s,)).fetchone()[0]
                for s in placed.values()]
        check("sweep: the answers still in retention replay", kept == ["replay"] * len(kept), kept)


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
token_ranges()
worker_down()
print(f"citus faults ({EDITION}): {'all passed' if not failures else f'{len(failures)} FAILED'}")
sys.exit(1 if failures else 0)
