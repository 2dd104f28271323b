"""The middlewares' cost per request: each sample app (tests/http) without idempotency (IDEM_OFF=1), with its
middleware in the default mode, and with it in the transactional mode (IDEM_TX=1: claim, the handler's write and the
finish in one commit), and for node and django the peer a team would pick instead (IDEM_PEER: npm
express-idempotency on Redis; PyPI django-idempotency-key on Django's database cache), all running side by side,
measured in interleaved rounds by bench/http/load.go. Each app runs on the stack it is named with (APP@STACK:
tests/http/serve.sh).
Prints one table row per app, workload and client count: the median of the rounds for each, and each variant's ratio
to the app without idempotency.
Started by bench/http.sh, which makes the server, the database and the node peer's Redis."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests/e2e"))
from harness import Process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# What each variant's app is started with, beside DATABASE_URL (and REDIS_URL for node's peer).
VARIANT_ENV = {"off": {"IDEM_OFF": "1"}, "idem": {}, "tx": {"IDEM_TX": "1"}}


@dataclass(frozen=True)
class Peer:
    """What a team on that framework would pick instead, the same app on it (IDEM_PEER)."""
    name: str  # its IDEM_PEER, and its name in the output
    column: str  # its column in the table
    redis: bool  # stores in Redis (--redis-url)


PEERS = {"node": Peer("express-idempotency", "express-idempotency + Redis", redis=True),
         "django": Peer("django-idempotency-key", "django-idempotency-key + database cache", redis=False)}


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
    p.add_argument("--apps", required=True, help="APP@STACK ... (e.g. go@sid python@host)")
    p.add_argument("--workloads", default="new replay")
    p.add_argument("--clients", default="1 8")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--redis-url", help="node's peer's Redis (redis://127.0.0.1:PORT); needed when node is measured")
    a = p.parse_args()
    apps = a.apps.split()
    if any("@" not in app for app in apps):
        p.error(f"--apps takes APP@STACK, each: {a.apps!r}")
    langs = [app.split("@")[0] for app in apps]
    if any(PEERS[lang].redis for lang in langs if lang in PEERS) and not a.redis_url:
        p.error("--redis-url is needed to measure node (its peer, express-idempotency, stores in Redis)")
    rows = []
    run_id = f"{os.getpid()}-{int(time.time())}"
    for app_name, lang in zip(apps, langs):
        peer = PEERS.get(lang)
        names = ["off", "idem", "tx"] + (["peer"] if peer else [])
        variants = {name: a.port + i for i, name in enumerate(names)}
        env = dict(VARIANT_ENV)
        if peer:
            env["peer"] = {"IDEM_PEER": peer.name, **({"REDIS_URL": a.redis_url} if peer.redis else {})}
        processes = [Process(f"bench-{lang}-{name}", ["bash", str(REPO / "tests/http/serve.sh"), app_name, str(port)],
                             {"DATABASE_URL": a.database_url, **env[name]}, a.workdir)
                     for name, port in variants.items()]
        try:
            for process, port in zip(processes, variants.values()):
                process.start()
                process.wait_listening(port, timeout=30)
            for workload in a.workloads.split():
                for clients in map(int, a.clients.split()):
                    rps = {name: [] for name in variants}
                    for r in range(a.rounds):
                        # Interleaved, and the order turns every round, so a drift of the machine hits every variant.
                        order = names[r % len(names):] + names[:r % len(names)]
                        for name in order:
                            prefix = f"{run_id}-{lang}-{name}-{workload}-{clients}-{r}"
                            rps[name].append(load(a.load, variants[name], clients, a.seconds, workload, prefix))
                    median = {name: statistics.median(v) for name, v in rps.items()}
                    rows.append((app_name, workload, clients, median))
                    rounds = " / ".join(f"{name} {[round(x) for x in v]}" for name, v in rps.items())
                    peer_rate = f", {peer.name} {median['peer']:.0f}/s" if peer else ""
                    print(f"{app_name} {workload} c{clients}: without {median['off']:.0f}/s, default mode "
                          f"{median['idem']:.0f}/s, transactional {median['tx']:.0f}/s{peer_rate} (rounds {rounds})",
                          flush=True)
        finally:
            for process in processes:
                process.stop()
    # The peer column is named after the peers measured: one, or each after its app.
    measured = [lang for lang in PEERS if lang in langs]
    peers = (PEERS[measured[0]].column if len(measured) == 1
             else "; ".join(f"{lang}: {PEERS[lang].column}" for lang in measured) or "peer")
    print("\n| app | workload | clients | without idempotency (req/s) | default mode (req/s) | ratio "
          f"| transactional mode (req/s) | ratio | {peers} (req/s) | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for app_name, workload, clients, m in rows:
        cells = [f"{m[name]:,.0f} | {m[name] / m['off']:.2f}×" if name in m else "– | –"
                 for name in ("idem", "tx", "peer")]
        print(f"| {app_name} | {workload} | {clients} | {m['off']:,.0f} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
