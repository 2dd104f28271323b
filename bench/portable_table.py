#!/usr/bin/env python3
"""The portable edition's table for docs/benchmarks.md, from bench/portable.sh's runs (bench/run.sh results).

Usage: bench/portable_table.py RUN.tsv...   each file named after its run: the request size in bytes (100.tsv),
or preload-SIZE.tsv for the run with the library preloaded; printed in that order, smaller sizes first.
Each cell is the median tps of the run's rounds; the ratios are of those medians, within one run."""
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def medians(path: Path) -> dict:
    rounds = defaultdict(list)
    with path.open() as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["section"] == "main":
                rounds[(row["workload"], int(row["clients"]), row["sync"], row["contender"])].append(float(row["tps"]))
    return {k: statistics.median(v) for k, v in rounds.items()}


def ratio(a, b) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


def main() -> None:
    print("| request | sync | workload | clients | SQL tps | PL/pgSQL tps | idem_keys tps | portable tps "
          "| portable ÷ PL/pgSQL | portable ÷ SQL | idem_keys ÷ portable |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    def order(path: Path) -> tuple:
        preloaded = path.stem.startswith("preload-")
        return (preloaded, int(path.stem.removeprefix("preload-")))

    for path in sorted((Path(name) for name in sys.argv[1:]), key=order):
        tps = medians(path)
        preloaded, size = order(path)
        label = f"{size:,} B".replace(",", " ") + (", preloaded" if preloaded else "")
        for wl, clients, sync in sorted({k[:3] for k in tps}, key=lambda k: (k[2] != "off", k[0] != "new", k[1])):
            get = lambda c: tps.get((wl, clients, sync, c))
            cells = [f"{get(c):.0f}" if get(c) else "–" for c in ("sql", "plpgsql", "idem", "portable")]
            workload = "new key (claim + finish)" if wl == "new" else wl
            print(f"| {label} | {sync} | {workload} | {clients} | " + " | ".join(cells) +
                  f" | **{ratio(get('portable'), get('plpgsql'))}** | {ratio(get('portable'), get('sql'))}"
                  f" | {ratio(get('idem'), get('portable'))} |")


if __name__ == "__main__":
    main()
