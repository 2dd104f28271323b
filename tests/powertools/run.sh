#!/usr/bin/env bash
# The Powertools stores (packages/idem-keys-powertools for Python, packages/idem-keys-powertools-ts for
# TypeScript) under Powertools' own decorators, each test on a database with the extension and on one with the
# portable edition, in a throwaway PostgreSQL, against the releases their ranges admit: Python on the floor and
# the newest release of Powertools (on Python 3.11) and on the newest (on Python 3.13, in the trixie root),
# TypeScript on every 2.x release of its peer range (POWERTOOLS_RELEASES=ends: the oldest
# and the newest only; each package's test.sh says more). Then the Redis comparison in smoke mode, so it never
# rots (not a measurement: bench/powertools/run.sh, ports PT_BENCH_PG_PORT and PT_BENCH_REDIS_PORT). Needs the
# extension installed. Port: POWERTOOLS_PG_PORT (default 25632).
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
port=${POWERTOOLS_PG_PORT:-25632}
start=$SECONDS
work=$(mktemp -d /tmp/idem-powertools.XXXXXX)
chmod 755 "$work" # the server runs as postgres and needs to reach its directory inside
trap 'bash scripts/cluster.sh stop "$work/pg"; rm -rf "$work"' EXIT

bash scripts/cluster.sh start "$work/pg" "$port"
# The three runs side by side, each on databases of its own (their tables and scopes never meet): the Python store on
# both ends of its Python range (the host's 3.11, trixie's 3.13: scripts/stacks.sh), and the TypeScript store, whose
# releases run side by side in turn. Most of their time is waiting on Powertools' and the tests' own timers.
# Seconds each may take: the TypeScript one runs its suite once per release (about a minute each, four at a time).
runs=("idem-keys-powertools host 600" "idem-keys-powertools trixie 600" "idem-keys-powertools-ts host 1800")
pids=() logs=()
for run in "${runs[@]}"; do
  read -r package stack limit <<<"$run"
  db=pt_${#logs[@]}
  logs+=("$work/$package-$stack.log")
  (
    edition_databases "$work/pg" "$port" "$db"
    t=$SECONDS
    echo "--- $package on $stack"
    DATABASE_URL_EXTENSION="postgres://shop@127.0.0.1:$port/${db}_ext" \
    DATABASE_URL_PORTABLE="postgres://shop@127.0.0.1:$port/${db}_portable" \
      timeout --kill-after=10 "$limit" bash scripts/stacks.sh run "$stack" bash "packages/$package/test.sh"
    echo "--- $package on $stack: ok in $((SECONDS - t)) s"
  ) >"${logs[-1]}" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do wait "${pids[i]}" || failed=$((failed + 1)); done
cat "${logs[@]}"
((failed == 0)) || { echo "powertools: $failed of ${#pids[@]} runs failed"; exit 1; }
bash scripts/cluster.sh stop "$work/pg"
echo "--- the Redis comparison, smoke"
bash bench/powertools/run.sh --smoke
echo "powertools: total $((SECONDS - start)) s"
