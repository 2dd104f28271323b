"""The table of medians the hop benchmarks (bench/scaleout.sh, bench/citus.sh) print after their rounds.

Usage: medians.py RESULTS BASELINE CONTENDER...
  RESULTS   one line per round: workload, clients, the baseline's tps, then each contender's tps (tab-separated)
  BASELINE  the baseline's name in the header; CONTENDER: each contender's, in the order of RESULTS' columns
Prints a Markdown table: per workload and client count, the median tps of each and each contender's ratio to
the baseline's median. Workloads appear in the order of their first round.
"""
import statistics
import sys

NAMES = {"new": "claim + finish, new key", "replay": "replay", "hop": "a function doing nothing: the hop"}

results, baseline, contenders = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [line.split("\t") for line in open(results).read().split("\n") if line]
order = list(dict.fromkeys(r[0] for r in rows))
header = [f"{baseline} tps"] + [f"{c} {col}" for c in contenders for col in ("tps", f"÷ {baseline}")]
print("\n| workload | clients | " + " | ".join(header) + " |")
print("|---" * (2 + len(header)) + "|")
for workload, clients in sorted({(r[0], int(r[1])) for r in rows}, key=lambda k: (order.index(k[0]), k[1])):
    mine = [r for r in rows if (r[0], int(r[1])) == (workload, clients)]
    med = [statistics.median(float(r[i]) for r in mine) for i in range(2, 3 + len(contenders))]
    cells = [f"{med[0]:,.0f}"] + [x for m in med[1:] for x in (f"{m:,.0f}", f"{m / med[0]:.2f}×")]
    print(f"| {NAMES.get(workload, workload)} | {clients} | " + " | ".join(cells) + " |")
