#!/usr/bin/env bash
# The Powertools stores (packages/idem-keys-powertools for Python, packages/idem-keys-powertools-ts for
# TypeScript) under Powertools' own decorators, each test on a database with the extension and on one with the
# portable edition, in a throwaway PostgreSQL, against the releases their ranges admit: Python on the floor and
# the newest release, TypeScript on every 2.x release of its peer range (POWERTOOLS_RELEASES=ends: the oldest
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
edition_databases "$work/pg" "$port" powertools
export DATABASE_URL_EXTENSION="postgres://shop@127.0.0.1:$port/powertools_ext"
export DATABASE_URL_PORTABLE="postgres://shop@127.0.0.1:$port/powertools_portable"
# Seconds each package may take: the TypeScript one runs its suite once per release (about a minute each).
declare -A limit=([idem-keys-powertools]=600 [idem-keys-powertools-ts]=1800)
for package in idem-keys-powertools idem-keys-powertools-ts; do
  echo "--- $package"
  t=$SECONDS
  timeout --kill-after=10 "${limit[$package]}" bash "packages/$package/test.sh"
  echo "--- $package: ok in $((SECONDS - t)) s"
done
bash scripts/cluster.sh stop "$work/pg"
echo "--- the Redis comparison, smoke"
bash bench/powertools/run.sh --smoke
echo "powertools: total $((SECONDS - start)) s"
