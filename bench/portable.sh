#!/usr/bin/env bash
# The portable edition against what a team would write instead, side by side: hand-written SQL, plain PL/pgSQL
# and the extension, interleaved round by round in one bench/run.sh per request size (new key and replay, 1 and
# 8 clients, synchronous_commit off and on). The server does not preload the library, as on a managed service
# where the portable edition runs; a last run preloads it, where idem_keys.* are set and the portable edition
# parses them on each call. Prints the table docs/benchmarks.md shows (23 min on 2 cores: 610 s per request size,
# 157 s preloaded).
#   bash bench/portable.sh            knobs: PORTABLE_BENCH_BYTES ("100 16384"), PORTABLE_BENCH_ROUNDS (3)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d /tmp/idem-portable-bench.XXXXXX)
trap 'rm -rf "$out"' EXIT
run() { # run TAG [VAR=VALUE ...]: one bench/run.sh, its rows into $out/TAG.tsv
  local tag=$1
  shift
  env BENCH_SHARED_BUFFERS=2GB BENCH_HUGE_PAGES= BENCH_WARMUP=1 BENCH_ROUNDS="${PORTABLE_BENCH_ROUNDS:-3}" \
    BENCH_GROWTH= BENCH_SWEEP_KEYS=0 BENCH_FLOOR= BENCH_BINDING= BENCH_WORKLOADS="new replay" BENCH_CLIENTS="1 8" \
    BENCH_RESULTS="$out/$tag.tsv" BENCH_DOCS="$out/docs-$tag" "$@" bash bench/run.sh >"$out/$tag.log" 2>&1 ||
    { tail -n 30 "$out/$tag.log" >&2; echo "bench/portable.sh: the $tag run failed" >&2; exit 1; }
}
read -ra sizes <<<"${PORTABLE_BENCH_BYTES:-100 16384}"
for bytes in "${sizes[@]}"; do
  run "$bytes" BENCH_PRELOAD= BENCH_BODY_BYTES="$bytes" BENCH_CONTENDERS="sql plpgsql idem portable" BENCH_SYNC="off on"
done
run "preload-${sizes[0]}" BENCH_BODY_BYTES="${sizes[0]}" BENCH_CONTENDERS="plpgsql portable" BENCH_SYNC=off
python3 bench/portable_table.py "$out"/*.tsv
