"""PostgreSQL restarts under every sample app: each must answer new keys 201 again within seconds, by itself.

Every app named (tests/http/serve.sh LANG), in the default and the transactional mode, is started against one
database, answers a first payment, and then the server is stopped at once (an immediate shutdown: every connection
dies without a goodbye, as in a crash or a failover) and started again. Each app then gets rounds of new keys, a few
at once, until a whole round is answered 201; it must get there within RECOVER_WITHIN seconds, and then stay there
for STAY_ROUNDS more rounds. Answers during the outage may be 5xx; every key is then retried until it is answered,
and each key must have exactly one payment, whatever it was answered along the way.

    python3 tests/http/restart.py --database-url URL --cluster DIR --workdir DIR --port PORT LANG...

The apps listen on PORT, PORT+1, ... (two per language). The recovery is the middleware's and its pool's, not the
edition's: one edition is enough (run.sh runs this on the extension's database).
"""
import argparse
import concurrent.futures
import http.client
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

from suite import PAY, REPO, App, Failed, expect, fresh, show  # the sample apps, as the suite runs them

RECOVER_WITHIN = 30.0  # seconds from the server's restart to a whole round of 201s
ROUND = 4  # new keys at once per round
STAY_ROUNDS = 3  # whole rounds of 201s after the first one
FINAL_TRIES = 10  # a key answered 5xx during the outage is retried this often, 0.5 s apart


def server(action, cluster, port):
    """Stops the cluster at once (immediate) or starts it again, through scripts/cluster.sh."""
    args = ["bash", str(REPO / "scripts/cluster.sh"), action, cluster] + ([str(port)] if action == "start" else [])
    subprocess.run(args, check=True, timeout=90)


def round_of(app, tenant, keys):
    """One new key per client, all at once: {key: status} (0 for a request that got no answer at all)."""
    def one(key):
        try:
            return app.post(key, tenant=tenant, timeout=10).status
        except (OSError, http.client.HTTPException):  # the app hung up or timed out: no answer
            return 0
    with concurrent.futures.ThreadPoolExecutor(len(keys)) as pool:
        return dict(zip(keys, pool.map(one, keys)))


def recover(app, restarted_at):
    """Rounds of new keys until a whole round is 201 (bounded), then STAY_ROUNDS more that must be; then every key
    answered otherwise is retried until it is answered, and each key has one payment. Returns the seconds to
    recovery and the statuses seen before it."""
    tenant = fresh("restart")
    seen, statuses = {}, []
    while True:
        got = round_of(app, tenant, [fresh("k") for _ in range(ROUND)])
        seen.update(got)
        if all(s == 201 for s in got.values()):
            recovered = time.monotonic() - restarted_at
            break
        statuses += sorted(got.values())
        expect(time.monotonic() - restarted_at < RECOVER_WITHIN,
               f"no whole round of 201s {RECOVER_WITHIN:g} s after the restart; last round: {sorted(got.values())}")
        time.sleep(0.2)
    for _ in range(STAY_ROUNDS):
        got = round_of(app, tenant, [fresh("k") for _ in range(ROUND)])
        seen.update(got)
        expect(all(s == 201 for s in got.values()), f"after recovering, a round answered {sorted(got.values())}")
    for key, status in seen.items():
        tries = 0
        while status != 201 and tries < FINAL_TRIES:
            time.sleep(0.5)
            status, tries = round_of(app, tenant, [key])[key], tries + 1
        expect(status == 201, f"{key}: still not answered 201 after {FINAL_TRIES} retries")
        expect(app.payments(tenant, key) == 1, f"{key}: {app.payments(tenant, key)} payments")
    return recovered, statuses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--cluster", required=True, help="the cluster's directory (scripts/cluster.sh)")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("langs", nargs="+")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally block stops the apps
    pg_port = urllib.parse.urlsplit(args.database_url).port
    apps = []
    for lang in args.langs:
        for mode, env in (("default", {}), ("transactional", {"IDEM_TX": "1"})):
            app = App(lang, args.port + len(apps), args.database_url, args.workdir, **env)
            app.label = f"{lang} {mode}"
            apps.append(app)
    results, failed = [], 0
    try:
        for app in apps:  # started together: the slow boots overlap
            app.process.start()
        for app in apps:
            app.process.wait_listening(app.port, timeout=90)
            first = app.post(fresh("k"), tenant=fresh("before"))
            expect(first.status == 201, f"{app.label} before the restart: {show(first)}")
        server("immediate", args.cluster, pg_port)
        server("start", args.cluster, pg_port)
        restarted_at = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(apps)) as pool:
            futures = {app: pool.submit(recover, app, restarted_at) for app in apps}
            for app, future in futures.items():
                try:
                    recovered, statuses = future.result()
                    results.append(f"  {app.label:<22} ok      201 again {recovered:4.1f} s after the restart"
                                   f"{'; before: ' + ' '.join(map(str, statuses)) if statuses else ''}")
                except Exception as e:  # noqa: BLE001 — every app gets its verdict
                    detail = str(e) if isinstance(e, Failed) else f"{type(e).__name__}: {e}"
                    results.append(f"  {app.label:<22} FAILED  {detail}")
                    print(f"-- {app.label}: {detail}\n-- last lines of {app.process.log_path}:\n"
                          f"{app.process.log_tail()}", flush=True)
                    failed += 1
    finally:
        for app in apps:
            app.stop()
    print("\nPostgreSQL restarted under the apps:")
    print("\n".join(results))
    print(f"http restart: {len(apps) - failed} passed, {failed} failed")
    sys.exit(1 if failed or len(results) < len(apps) else 0)


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent)
    main()
