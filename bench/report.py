#!/usr/bin/env python3
"""Numbers for bench/run.sh: latency percentiles from pgbench per-transaction logs, and the report.

  report.py stats LOG_PREFIX [--window T0 T1]   prints "count p50_ms p99_ms" (window: transactions started in it)
  report.py render DIR OUT.md [--charts DIR]     DIR holds results.tsv, facts.tsv, meta.md

Stdlib only, except matplotlib, imported only when charts are asked for (the smoke run draws none).
"""
import argparse
import csv
import glob
import os
import statistics
from collections import defaultdict, namedtuple

CONTENDERS = ["sql", "plpgsql", "idem", "portable"]
LABEL = {"sql": "hand-written SQL", "plpgsql": "PL/pgSQL", "idem": "idem_keys", "portable": "portable edition"}
WORKLOADS = {"new": "new key (claim + finish)", "replay": "replay of a finished key",
             "busy": "in-progress conflict", "mismatch": "mismatch (same key, other body)"}
METHOD = """## How it is measured

- One server, one run. For each workload, client count and `synchronous_commit` setting the contenders
  run one after another, their order rotated every round; the tables show the median of the rounds.
- Same rows, same table shape: the baselines' tables are `CREATE TABLE … (LIKE idem_keys INCLUDING ALL)`
  (columns, CHECK constraints, primary key and both partial sweep indexes).
- **hand-written SQL** (`bench/scripts/sql/`): `INSERT … ON CONFLICT DO NOTHING RETURNING`; when that inserted
  nothing, a `SELECT` of the row and the decision in the client (pgbench `\\if`); after the work an `UPDATE`
  stores the answer. Every workload takes two round trips.
- **PL/pgSQL** (`bench/schema.sql`): `bench_plpgsql.claim()` and `finish()` with the same outcomes, written
  plainly (no `SECURITY DEFINER`, no `SET search_path`).
- **idem_keys**: `idem_claim()` and `idem_finish()`, which are `SECURITY DEFINER` with a pinned `search_path`,
  a per-call cost the baselines do not pay.
- **portable edition**: the same two functions from `dist/idem_keys_portable.sql` (docs/portable.md), in PL/pgSQL,
  installed into the schema `bench_portable`: what a managed service without the extension runs. idem_keys ÷
  portable is what the Rust earns.
- Fingerprints: idem_keys' canonical SHA-256; the baselines `sha256` of the jsonb text. Request, answer and
  key are bind parameters (pgbench variables, `-M prepared`). New keys are random 63-bit numbers; replay and
  mismatch pick uniformly among the stored finished keys, in-progress among keys claimed with a one-day lease.
- Every transaction checks its outcome (an unexpected one aborts the run), and before measuring, each
  contender passes claimed → replay with the stored answer → mismatch → in_progress → recovered.
- pgbench shares the machine's cores and talks over the Unix socket, the cheapest round trip there is; over a
  network each extra round trip of the hand-written protocol costs more than here.
- Latency percentiles leave out each connection's first transaction, for every contender: it pays for its new
  backend's start-up (loading libraries, preparing plans), which a connection pool hides. Claims during a
  sweep run as 2 s pgbench runs back to back until it ends, and with those first transactions counted a
  third of their slowest 1 % was connection start-up.
- Sweep: expired keys (1 M in the full run; expiries spread over an hour, as `idem_finish` writes them) are
  swept while 4 clients claim new keys at 200/s with `synchronous_commit = on`; each sweep is compared with
  the same claims measured right before it (10 s in the full run), in 3 rounds of the three ways (full run),
  and the verdict is the median of the rounds' ratios.
"""
# The growth section's workloads, in table order.
GROWTH_WORKLOADS = ("new", "replay", "recent")
GROWTH_LABEL = {"new": "new key", "replay": "replay (any key)", "recent": "replay of a recent key"}
# The two ways the sweep section deletes expired keys: (fact/workload suffix, label).
SWEEPS = (("worker", "the background worker"), ("paced", "CALL idem_sweep_paced() (pg_cron)"),
          ("call", "one idem_sweep() call"))
KEEP_MARK = "<!-- Everything below this line is kept when the harness rewrites this file. -->"


def percentile(sorted_values, p):
    """Nearest-rank percentile: a value that was actually measured, no interpolation."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * p // 100))  # ceil without floats
    return sorted_values[int(rank) - 1]


def read_latencies(prefix, window=None):
    """Latencies in ms of the transactions in pgbench's -l logs (one file per pgbench thread).

    Line format (PostgreSQL 15): client_id transaction_no time_us script_no end_epoch end_us [lag] [retries];
    time is "failed" or "skipped" for transactions that did not complete, which run.sh already refuses.

    Each connection's first transaction (transaction_no 1) is left out, for every contender: it pays for
    its new backend (loading libraries, preparing plans, filling catalog caches), which an application on a
    connection pool does not see. It mattered where runs are short: the claims during a sweep run as 2 s
    pgbench runs back to back, and their first transactions (2-4 ms against 0.6) were a third of the
    slowest 1 %.
    """
    latencies = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        with open(path) as log:
            for line in log:
                fields = line.split()
                if len(fields) < 6 or not fields[2].isdigit() or fields[1] == "1":
                    continue
                micros = int(fields[2])
                if window:
                    started = int(fields[4]) + int(fields[5]) / 1e6 - micros / 1e6
                    if not window[0] <= started <= window[1]:
                        continue
                latencies.append(micros / 1000)
    latencies.sort()
    return latencies


def cmd_stats(args):
    lat = read_latencies(args.prefix, args.window)
    print(f"{len(lat)} {percentile(lat, 50):.3f} {percentile(lat, 99):.3f}")


def load(directory):
    """Median over rounds of each measured configuration; facts as a dict."""
    runs = defaultdict(list)
    with open(os.path.join(directory, "results.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            key = (row["section"], row["workload"], row["contender"], int(row["clients"]), row["sync"],
                   int(row["keys"]))
            runs[key].append(row)
    med = {}
    for key, rows in runs.items():
        med[key] = {m: statistics.median(float(r[m]) for r in rows) for m in ("tps", "p50", "p99", "n")}
        med[key]["rounds"] = len(rows)
    facts = {}
    facts_path = os.path.join(directory, "facts.tsv")
    if os.path.exists(facts_path):
        with open(facts_path) as f:
            for line in f:
                name, _, value = line.rstrip("\n").partition("\t")
                facts[name] = value
    return med, facts


SweepRound = namedtuple("SweepRound", "round without during seconds deleted")


def sweep_rounds(directory, facts):
    """Per sweep way, its rounds in order (SweepRound: the claims' results.tsv rows without and during it).

    Each sweep is held against the claims measured right before it, so its ratio is taken per round and the
    verdict is the median of those ratios, not a ratio of medians from different minutes.
    """
    rows = defaultdict(dict)
    with open(os.path.join(directory, "results.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["section"] == "sweep":  # workload claim_without_HOW or claim_during_HOW
                phase, _, how = row["workload"].partition("_")[2].partition("_")
                rows[how].setdefault(int(row["round"]), {})[phase] = row
    return {how: [SweepRound(r, p["without"], p["during"], float(facts.get(f"sweep_seconds_{how}:{r}", "nan")),
                             int(facts.get(f"sweep_deleted_{how}:{r}", 0)))
                  for r, p in sorted(by_round.items()) if "without" in p and "during" in p]
            for how, by_round in rows.items()}


def p99_ratio(sweep):
    return ratio(float(sweep.during["p99"]), float(sweep.without["p99"]))


def ratio(a, b):
    return a / b if b else float("nan")


def find(med, *prefix):
    """The medians of the first configuration whose key starts with prefix (section, workload, contender, ...)."""
    return next((v for k, v in med.items() if k[:len(prefix)] == prefix), None)


def axes_of(med, section):
    """The configurations of one section, and pick(i): the sorted distinct values of key field i among them."""
    keys = [k for k in med if k[0] == section]
    return keys, lambda i, order=None: sorted({k[i] for k in keys}, key=order)


def main_tables(med):
    out = []
    keys, pick = axes_of(med, "main")
    present = [c for c in CONTENDERS if any(k[2] == c for k in keys)]
    versus = [b for b in ("sql", "plpgsql", "portable") if b in present and "idem" in present]
    for sync in pick(4, lambda s: s != "off"):
        out.append(f"\n### synchronous_commit = {sync}\n")
        for wl in [w for w in WORKLOADS if w in pick(1)]:
            out.append(f"\n**{WORKLOADS[wl]}**\n")
            out.append("| clients | " + " | ".join(f"{LABEL[c]} tps (p50 / p99 ms)" for c in present)
                       + "".join(f" | idem_keys ÷ {LABEL[b]}" for b in versus) + " |")
            out.append("|---:|" + "---:|" * (len(present) + len(versus)))
            for clients in pick(3):
                cell = {c: find(med, "main", wl, c, clients, sync) for c in present}
                if not all(cell.values()):
                    continue
                row = [f"{cell[c]['tps']:.0f} ({cell[c]['p50']:.2f} / {cell[c]['p99']:.2f})" for c in present]
                row += [f"{ratio(cell['idem']['tps'], cell[b]['tps']):.2f}×" for b in versus]
                out.append(f"| {clients} | " + " | ".join(row) + " |")
    return out


def floor_table(med):
    """Replay and idem_lookup of a finished key against SELECT 1 over the same connection (the round-trip floor)."""
    out = []
    keys, pick = axes_of(med, "floor")
    if not keys:
        return out
    out.append("| sync | clients | SELECT 1 tps | replay, outcome: tps (p50 / p99 ms) | ÷ floor "
               "| replay, whole answer: tps (p50 / p99 ms) | ÷ floor | idem_lookup: tps (p50 / p99 ms) | ÷ floor |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    cell = lambda v, f: f"{v['tps']:.0f} ({v['p50']:.3f} / {v['p99']:.3f}) | {ratio(v['tps'], f['tps']):.2f}×"
    rows = []  # against PostgreSQL's own read of the row, when the run has it
    for sync in pick(4, lambda s: s != "off"):
        for clients in pick(3):
            f, o, r, l, ro, rl = (find(med, "floor", wl, c, clients, sync)
                                  for wl, c in (("replay", "floor"), ("outcome", "idem"), ("replay", "idem"),
                                                ("lookup", "idem"), ("outcome", "row"), ("lookup", "row")))
            if not (f and o and r and l):
                continue
            out.append(f"| {sync} | {clients} | {f['tps']:.0f} | {cell(o, f)} | {cell(r, f)} | {cell(l, f)} |")
            if ro and rl:
                rows.append(f"| {sync} | {clients} | {cell(ro, f)} | {ratio(o['tps'], ro['tps']):.2f}× "
                            f"| {cell(rl, f)} | {ratio(l['tps'], rl['tps']):.2f}× |")
    out.append("\nThe floor is `SELECT 1` through the same pgbench, protocol and connection: what a call costs with "
               "no server-side work at all. Replay is `idem_claim` of a finished key: reading its outcome, "
               "`SELECT (idem_claim(…)).outcome` (what the round-trip floor targets measure), and reading the "
               "whole answer as the bench's claim script does (`FROM idem_claim(…) r`: outcome, token, status, "
               "response, headers, retry_after); lookup reads the outcome of `idem_lookup` of one. They are "
               "rotated every round, and so is PostgreSQL's own read of the row when the run has it (below).")
    if rows:
        out += ["", "**Against PostgreSQL's own read of the row.** The least SQL can do to read a finished key: a "
                "prepared `SELECT status_code FROM idem_keys WHERE scope || key = … AND key = …` through the hash "
                "index a replay probes, one column, no function, no fingerprint; for the replay also given the "
                "request as a replay is (`:req::jsonb IS NULL` in its target list: a jsonb parameter, parsed at "
                "Bind). Its ÷ floor is what PostgreSQL's executor reaches for that read on this machine; replay ÷ "
                "it above 1 is a replay faster than it.", "",
                "| sync | clients | SELECT of the row, with the request: tps (p50 / p99 ms) | ÷ floor "
                "| replay, outcome ÷ it | SELECT of the row: tps (p50 / p99 ms) | ÷ floor | idem_lookup ÷ it |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"] + rows
    return out


def growth_tables(med, facts):
    out = []
    keys, pick = axes_of(med, "growth")
    if not keys:
        return out
    sizes = pick(5)
    out.append("| keys stored | " + " | ".join(f"{LABEL[c]} new / replay / recent replay tps" for c in CONTENDERS)
               + " | " + " | ".join(f"{LABEL[c]} bytes/key" for c in CONTENDERS) + " |")
    out.append("|---:|" + "---:|" * (2 * len(CONTENDERS)))
    for size in sizes:
        row = []
        for c in CONTENDERS:
            cells = [med.get(("growth", wl, c, keys[0][3], keys[0][4], size)) for wl in GROWTH_WORKLOADS]
            row.append(" / ".join(f"{v['tps']:.0f}" if v else "–" for v in cells))
        row += [facts.get(f"bytes_per_key:{c}:{size}", "–") for c in CONTENDERS]
        out.append(f"| {int(size):,} | " + " | ".join(row) + " |")
    out.append(f"\n{keys[0][3]} clients, synchronous_commit = {keys[0][4]}; "
               f"{facts.get('growth_note', 'tables filled side by side')}. Keys stored: finished keys filled "
               "before the step; the step's own new-key runs add more. Replay picks any stored key (uniformly, "
               "the growth target's workload and the worst case for memory); recent replay one of the newest "
               "10,000, as a retry does. Bytes/key: pg_total_relation_size (heap, TOAST, all three indexes) ÷ "
               "rows, right after the fill, with the ~200-byte response.")
    first, last = sizes[0], sizes[-1]
    for wl in GROWTH_WORKLOADS:
        a, b = (find(med, "growth", wl, "idem", keys[0][3], keys[0][4], s) for s in (first, last))
        if a and b and len(sizes) > 1:
            out.append(f"- idem_keys {GROWTH_LABEL[wl]}: {a['tps']:.0f} → {b['tps']:.0f} tps from {int(first):,} to "
                       f"{int(last):,} keys ({(ratio(b['tps'], a['tps']) - 1) * 100:+.1f} %)")
    return out


def targets(med, facts, sweeps):
    """Each target of the side-by-side benchmark and the round-trip floor against the measured medians:
    (target, measured, verdict)."""
    rows = []

    for clients in (1, 8):
        i, s, p = (find(med, "main", "new", c, clients, "off") for c in ("idem", "sql", "plpgsql"))
        if i and s and p:
            rs, rp = ratio(i["tps"], s["tps"]), ratio(i["tps"], p["tps"])
            rows.append((f"new key, clients = {clients}, sync off: ≥ 1.0× SQL and ≥ 1.1× PL/pgSQL",
                         f"{rs:.2f}× SQL, {rp:.2f}× PL/pgSQL", "met" if rs >= 1.0 and rp >= 1.1 else "**not met**"))
    replay = [(k[3], k[4], ratio(v["tps"], med[("main", "replay", "sql") + k[3:]]["tps"]))
              for k, v in med.items() if k[:3] == ("main", "replay", "idem") and ("main", "replay", "sql") + k[3:] in med]
    if replay:
        worst = min(replay, key=lambda t: t[2])
        rows.append(("replay ≥ 1.3× SQL (every client count and sync setting)",
                     f"{min(r[2] for r in replay):.2f}× to {max(r[2] for r in replay):.2f}× "
                     f"(lowest: clients = {worst[0]}, sync {worst[1]})",
                     "met" if worst[2] >= 1.3 else "**not met**"))
    for wl, label, verb in (("outcome", "replay", "idem_claim"), ("lookup", "lookup", "idem_lookup")):
        for clients, goal in ((1, 0.8), (8, 0.6)):
            f, i = (find(med, "floor", w, c, clients, "off") for w, c in (("replay", "floor"), (wl, "idem")))
            if f and i:
                r = ratio(i["tps"], f["tps"])
                rows.append((f"{label} (the outcome of {verb} of a finished key), clients = {clients}, sync off: "
                             f"≥ {goal}× SELECT 1",
                             f"{r:.2f}× ({i['tps']:.0f} / {f['tps']:.0f} tps)", "met" if r >= goal else "**not met**"))
    for how, label in SWEEPS:
        rounds = sweeps.get(how)
        if rounds:
            r = statistics.median(p99_ratio(s) for s in rounds)
            seconds = [s.seconds for s in rounds]
            rows.append((f"sweep of {rounds[0].deleted:,} keys by {label}: claim p99 during ≤ 2× without",
                         f"{r:.2f}×, the median of {len(rounds)} round(s): "
                         + ", ".join(f"{float(s.during['p99']):.2f}/{float(s.without['p99']):.2f} ms = {p99_ratio(s):.2f}×"
                                     for s in rounds)
                         + f" (sweeps took {min(seconds):.1f}–{max(seconds):.1f} s)",
                         "met" if r <= 2 else "**not met**"))
    keys, pick = axes_of(med, "growth")
    sizes = pick(5)
    if len(sizes) > 1:
        for wl in ("new", "replay"):
            first, last = (find(med, "growth", wl, "idem", keys[0][3], keys[0][4], s) for s in (sizes[0], sizes[-1]))
            if first and last:
                change = ratio(last["tps"], first["tps"]) - 1
                rows.append((f"{GROWTH_LABEL[wl]}: ≤ 10 % throughput drop from {sizes[0]:,} to {sizes[-1]:,} stored keys",
                             f"{first['tps']:.0f} → {last['tps']:.0f} tps ({change * 100:+.1f} %)",
                             "met" if change >= -0.10 else "**not met**"))
    return rows


def charts(med, directory):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    written = []
    keys, pick = axes_of(med, "main")
    workloads = [w for w in WORKLOADS if w in pick(1)]
    # A partial run without the main workloads (BENCH_WORKLOADS=" ") draws only what it measured.
    if workloads:
        syncs = pick(4, lambda s: s != "off")
        fig, axs = plt.subplots(1, len(workloads), figsize=(4 * len(workloads), 3.6), squeeze=False)
        for ax, wl in zip(axs[0], workloads):
            for c in CONTENDERS:
                for sync, style in zip(syncs, ("-", "--")):
                    pts = sorted((k[3], v["tps"]) for k, v in med.items() if k[:3] == ("main", wl, c) and k[4] == sync)
                    if pts:
                        ax.plot(*zip(*pts), style, marker="o", label=f"{LABEL[c]}, sync {sync}")
            ax.set(title=WORKLOADS[wl], xlabel="clients", ylabel="transactions/s", xscale="log")
            ax.set_xticks(pick(3), [str(c) for c in pick(3)])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
        axs[0][0].legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, directory, "throughput_by_clients.png"))

        clients = 8 if 8 in pick(3) else pick(3)[-1]
        fig, ax = plt.subplots(figsize=(8, 3.6))
        width = 0.8 / len(CONTENDERS)
        for i, c in enumerate(CONTENDERS):
            cells = [find(med, "main", wl, c, clients, syncs[0]) for wl in workloads]
            xs = [j + (i - (len(CONTENDERS) - 1) / 2) * width for j in range(len(workloads))]
            ax.bar(xs, [v["p99"] if v else 0 for v in cells], width, label=f"{LABEL[c]} p99", alpha=0.45)
            ax.bar(xs, [v["p50"] if v else 0 for v in cells], width * 0.5, label=f"{LABEL[c]} p50", color=f"C{i}")
        ax.set_xticks(range(len(workloads)), [WORKLOADS[w] for w in workloads], fontsize=7)
        ax.set(ylabel="latency, ms", title=f"Latency by workload ({clients} clients, sync {syncs[0]})")
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        written.append(_save(fig, directory, "latency_by_workload.png"))

    gkeys, gpick = axes_of(med, "growth")
    if gkeys:
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for c in CONTENDERS:
            for wl, style in (("new", "-"), ("replay", ":"), ("recent", "--")):
                pts = sorted((k[5], v["tps"]) for k, v in med.items() if k[:3] == ("growth", wl, c))
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", color=f"C{CONTENDERS.index(c)}",
                            label=f"{LABEL[c]} {GROWTH_LABEL[wl]}")
        ax.set(xscale="log", xlabel="keys already stored", ylabel="transactions/s",
               title=f"Growth ({gkeys[0][3]} clients, sync {gkeys[0][4]})")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
        fig.tight_layout()
        written.append(_save(fig, directory, "growth.png"))
    return written


def _save(fig, directory, name):
    import matplotlib.pyplot as plt
    fig.savefig(os.path.join(directory, name), dpi=110)
    plt.close(fig)
    return os.path.join(directory, name)


def cmd_render(args):
    med, facts = load(args.dir)
    sweeps = sweep_rounds(args.dir, facts)
    with open(os.path.join(args.dir, "meta.md")) as f:
        meta = f.read()
    lines = ["# Benchmarks: idem_keys against hand-written SQL and PL/pgSQL", "",
             "Written by `bench/run.sh`; do not edit above the mark at the end, the next run rewrites it.",
             "", meta, "", METHOD, "## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {v} |" for t, m, v in targets(med, facts, sweeps)]
    lines += ["", "## Throughput and latency", "",
              "Median of the rounds; each cell is one pgbench run of the contender's script (tps without the "
              "connection time; p50 and p99 from the per-transaction log, warm-up discarded, and so is each "
              "connection's first transaction: its new backend's start-up, which a connection pool hides).", ""]
    lines += main_tables(med)
    floor = floor_table(med)
    if floor:
        lines += ["", "## Against the round-trip floor", ""] + floor
    growth = growth_tables(med, facts)
    if growth:
        lines += ["", "## Growth", ""] + growth
    if sweeps:
        lines += ["", "## Sweep", "", f"Expired keys deleted while new-key claims arrive ({facts.get('sweep_note', '')}). "
                  "Each round sweeps with each of the three ways in turn, each against the same claims measured "
                  "right before it without a sweep; the target's verdict is the median of the rounds' ratios.", "",
                  "| way | round | claims without: p50 / p99 ms | deleted | in s | claims during: p50 / p99 ms (claims) | p99 ratio |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for how, label in SWEEPS:
            for s in sweeps.get(how, []):
                w, d = s.without, s.during
                lines.append(f"| {label} | {s.round} | {float(w['p50']):.2f} / {float(w['p99']):.2f} | {s.deleted:,} | "
                             f"{s.seconds:.1f} | {float(d['p50']):.2f} / {float(d['p99']):.2f} ({int(float(d['n']))}) | "
                             f"{p99_ratio(s):.2f}× |")
    if args.charts:
        rel = os.path.relpath(args.charts, os.path.dirname(os.path.abspath(args.out)))
        lines += ["", "## Charts", ""]
        lines += [f"![{os.path.basename(p)}]({rel}/{os.path.basename(p)})" for p in charts(med, args.charts)]
    kept = ""
    if os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read()
        if KEEP_MARK in old:
            kept = old.split(KEEP_MARK, 1)[1]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n\n" + KEEP_MARK + (kept or "\n\n## Optimisation log\n\n(none recorded yet)\n"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(required=True)
    p = sub.add_parser("stats")
    p.add_argument("prefix")
    p.add_argument("--window", nargs=2, type=float)
    p.set_defaults(func=cmd_stats)
    p = sub.add_parser("render")
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--charts")
    p.set_defaults(func=cmd_render)
    args = parser.parse_args()
    args.func(args)
