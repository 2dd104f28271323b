#!/usr/bin/env bash
# The same short benchmark on every supported major, for docs/benchmarks.md's table "Per PostgreSQL major":
# new-key and replay tps of idem_keys and hand-written SQL, as a ratio to 15 and to that major's SQL, and
# replay and idem_lookup against the SELECT 1 floor and against PostgreSQL's own SELECT of the row.
#   bash bench/majors.sh            PG_MAJORS (default 15 16 17 18), 8 clients, sync off, 3 rounds of 5 s
# Each major runs bench/run.sh on its own server (16 from the wheel's tree, scripts/pg16.sh; 17 and 18 in
# their Debian roots, scripts/pg_root.sh), one after another on the same machine; the majors' runs are
# minutes apart, so compare ratios, not raw tps.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
out=target/majors # each major's results.tsv and log stay here for a second look
mkdir -p "$out"
export BENCH_SECONDS=${BENCH_SECONDS:-5} BENCH_WARMUP=${BENCH_WARMUP:-2} BENCH_ROUNDS=${BENCH_ROUNDS:-3}
export BENCH_CLIENTS=${BENCH_CLIENTS:-8} BENCH_SYNC=${BENCH_SYNC:-off} BENCH_WORKLOADS=${BENCH_WORKLOADS:-new replay}
export BENCH_CONTENDERS=${BENCH_CONTENDERS:-sql idem} BENCH_BASE_KEYS=${BENCH_BASE_KEYS:-10000}
export BENCH_GROWTH="" BENCH_SWEEP_KEYS=0
host=$(pg_major)
for major in ${PG_MAJORS:-$SUPPORTED_MAJORS}; do
  echo "=== majors: PostgreSQL $major"
  # --smoke: no docs written and no charts; the knobs above make its runs as long as a real measurement.
  [ "$(where_major "$major")" = root ] && bash scripts/pg_root.sh ensure "$major"
  in_major "$major" bash scripts/setup.sh >/dev/null
  in_major "$major" bash -c 'cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null &&
    BENCH_RESULTS="$1" bash bench/run.sh --smoke' _ "$out/pg$major.tsv" >"$out/pg$major.log"
done
python3 - "$out" ${PG_MAJORS:-$SUPPORTED_MAJORS} <<'PY'
import csv, statistics, sys
out, majors = sys.argv[1], sys.argv[2:]
tps, rows_of = {}, {}
for m in majors:
    rows = rows_of[m] = list(csv.DictReader(open(f"{out}/pg{m}.tsv"), delimiter="\t"))
    for wl in ("new", "replay"):
        for c in ("sql", "idem"):
            got = [float(r["tps"]) for r in rows if r["section"] == "main" and r["workload"] == wl and r["contender"] == c]
            tps[m, wl, c] = statistics.median(got)
def median_tps(m, wl, c):
    got = [float(r["tps"]) for r in rows_of[m] if r["section"] == "floor" and r["workload"] == wl and r["contender"] == c]
    return statistics.median(got) if got else float("nan")
def floor(m, wl, c="idem"):  # c's median ÷ SELECT 1's; "row" is PostgreSQL's own SELECT of the row
    return median_tps(m, wl, c) / median_tps(m, "replay", "floor")
base = majors[0]
print(f"| major | new key: idem_keys tps | SQL tps | ÷ SQL | ÷ idem_keys on {base} | replay: idem_keys tps | SQL tps | ÷ SQL | ÷ idem_keys on {base} | replay ÷ SELECT 1 (outcome) | (whole answer) | lookup ÷ SELECT 1 | SELECT of the row, with the request, ÷ SELECT 1 | replay ÷ it | SELECT of the row ÷ SELECT 1 | lookup ÷ it |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for m in majors:
    cells = []
    for wl in ("new", "replay"):
        i = tps[m, wl, "idem"]
        q = tps[m, wl, "sql"]
        cells += [f"{i:.0f}", f"{q:.0f}", f"{i / q:.2f}×", f"{i / tps[base, wl, 'idem']:.2f}×"]
    cells += [f"{floor(m, wl):.2f}×" for wl in ("outcome", "replay", "lookup")]
    for wl in ("outcome", "lookup"):
        cells += [f"{floor(m, wl, 'row'):.2f}×", f"{median_tps(m, wl, 'idem') / median_tps(m, wl, 'row'):.2f}×"]
    print(f"| {m} | " + " | ".join(cells) + " |")
PY
