#!/usr/bin/env bash
# Instructions per call (the round-trip floor): the backend that serves a 1-client pgbench runs under callgrind, so
# every layer's cost is an exact instruction count instead of a sample share. Compares the SELECT 1 floor,
# a replay (the outcome form the floor targets measure) and idem_lookup, each over the bench's finished keys.
#   bash bench/callgrind_replay.sh [WHAT] [transactions]   WHAT as read_script takes (bench/common.sh): replay
#   (the default), lookup, floor, args or PostgreSQL's own SELECT of the row; 20000 transactions by default
#   CG_KEEP=FILE keeps callgrind's output there (for callgrind_annotate --tree=both), CG_LINES=N lines shown.
# Prints instructions per transaction for the whole backend and callgrind_annotate's inclusive view
# (per transaction: Ir ÷ transactions); installs valgrind if missing. Instructions are not time (cache
# misses and the kernel are not in them): pgbench ratios (make bench) stay the measure of speed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
source bench/common.sh
what=${1:-replay}
n=${2:-20000}
command -v valgrind >/dev/null || bash scripts/apt_install.sh callgrind valgrind
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else sudo -u postgres "$@"; fi; }
start_server cg 25497 "synchronous_commit = off" "shared_buffers = 256MB" "autovacuum = off"
fill_finished 10000
bash scripts/cluster.sh stop "$dir"
# The postmaster runs under callgrind; its forked backends inherit it, each with its own output file.
as_postgres valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" --collect-atstart=no \
  --toggle-collect=PostgresMain \
  "$bin/postgres" -D "$dir/data" >"$dir/valgrind.log" 2>&1 &
for _ in $(seq 1 120); do sql -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 1; done
read_script "$what" 10000 "$dir/script.sql"
"$PGBENCH" -n -M prepared -h "$dir" -p "$PORT" -U postgres -c 1 -j 1 -t "$n" -D scope=fin -D req="$BODY" \
  -f "$dir/script.sql" postgres | grep -E '^tps'
bash scripts/cluster.sh stop "$dir"
for _ in $(seq 1 60); do pgrep -u postgres -f "valgrind.*$dir" >/dev/null || break; sleep 1; done
# The backend that served pgbench did the most work.
out=$(for f in "$dir"/cg.*; do echo "$(grep -m1 '^summary:' "$f" | awk '{print $2}') $f"; done | sort -rn | sed -n 1p)
ir=${out%% *}
file=${out#* }
[ -n "${CG_KEEP:-}" ] && cp "$file" "$CG_KEEP"
echo "instructions per transaction in PostgresMain (the session, its start included): $((ir / n))"
callgrind_annotate --inclusive=yes --threshold=99.5 "$file" 2>/dev/null |
  awk -v n="$n" '/^ *[0-9,]+ .*:/ { v = $1; gsub(",", "", v); $1 = ""; printf "%9.0f %s\n", v / n, $0 }' |
  sed -n "1,${CG_LINES:-90}p"
