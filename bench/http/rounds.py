"""The middlewares' cost per request: each sample app (tests/http) with its middleware against the same app with
IDEM_OFF=1 (no idempotency), both running side by side, measured in interleaved rounds by bench/http/load.go.
Prints one table row per language, workload and client count: the median of the rounds for each, and their ratio.
Started by bench/http.sh, which makes the server and the database."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests/e2e"))
from harness import Process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def load(binary, port, clients, seconds, workload, prefix):
    out = subprocess.run([binary, "-url", f"http://127.0.0.1:{port}", "-clients", str(clients), "-seconds",
                          str(seconds), "-keys", workload, "-prefix", prefix],
                         capture_output=True, text=True, timeout=seconds + 120, check=True)
    result = json.loads(out.stdout)
    bad = {k: v for k, v in result["statuses"].items() if k not in ("200", "201")}
    if bad:
        raise SystemExit(f"load on port {port}: answers other than 2xx: {bad}")
    return result["rps"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--database-url", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--load", required=True, help="the load binary")
    p.add_argument("--langs", default="go python node")
    p.add_argument("--workloads", default="new replay")
    p.add_argument("--clients", default="1 8")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5)
    a = p.parse_args()
    rows = []
    run_id = f"{os.getpid()}-{int(time.time())}"
    for lang in a.langs.split():
        variants = {"off": a.port, "idem": a.port + 1}
        apps = [Process(f"bench-{lang}-{name}", ["bash", str(REPO / "tests/http/serve.sh"), lang, str(port)],
                        {"DATABASE_URL": a.database_url, **({"IDEM_OFF": "1"} if name == "off" else {})}, a.workdir)
                for name, port in variants.items()]
        try:
            for app, port in zip(apps, variants.values()):
                app.start()
                app.wait_listening(port, timeout=30)
            for workload in a.workloads.split():
                for clients in map(int, a.clients.split()):
                    rps = {name: [] for name in variants}
                    for r in range(a.rounds):
                        # Interleaved, and the order flips every round, so a drift of the machine hits both.
                        order = list(variants) if r % 2 == 0 else list(reversed(variants))
                        for name in order:
                            prefix = f"{run_id}-{lang}-{name}-{workload}-{clients}-{r}"
                            rps[name].append(load(a.load, variants[name], clients, a.seconds, workload, prefix))
                    off, idem = statistics.median(rps["off"]), statistics.median(rps["idem"])
                    rows.append((lang, workload, clients, off, idem, rps))
                    print(f"{lang} {workload} c{clients}: without {off:.0f}/s, with {idem:.0f}/s "
                          f"(rounds {[round(x) for x in rps['off']]} / {[round(x) for x in rps['idem']]})",
                          flush=True)
        finally:
            for app in apps:
                app.stop()
    print("\n| app | workload | clients | without idempotency (req/s) | with the middleware (req/s) | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for lang, workload, clients, off, idem, _ in rows:
        print(f"| {lang} | {workload} | {clients} | {off:,.0f} | {idem:,.0f} | {idem / off:.2f}× |")


if __name__ == "__main__":
    main()
