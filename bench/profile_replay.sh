#!/usr/bin/env bash
# Where a replay's time goes (against the round-trip floor), three views:
# * 1 client (default): perf on the one backend that serves a 1-client pgbench replaying the bench's
#   finished keys (its request and ~200-byte answer, bench/common.sh), call graphs by DWARF (Debian's
#   PostgreSQL has no frame pointers), children included: perf's children view of the backend.
# * PROFILE_CLIENTS=8 (any N > 1): the whole machine (`perf record -a`, no call graphs) while N clients run,
#   as CPU time per transaction: µs = samples ÷ frequency ÷ transactions, by process (the backends
#   together, pgbench), by the backends' DSO (kernel, postgres, libc, idem_keys.so), and the backends' top
#   symbols. That is the saturated case, where every microsecond of the backend is a lost transaction.
# * PROFILE_STAT=1 (any number of clients): `perf stat -e task-clock` of the backends and of pgbench for
#   4 s, as on-CPU µs per transaction: how much CPU the same work takes when the clients wait between calls.
#   bash bench/profile_replay.sh [replay|lookup|floor]   default replay; installs linux-perf if missing
# docs/benchmarks.md groups the output into layers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
source bench/common.sh
what=${1:-replay}
clients=${PROFILE_CLIENTS:-1}
freq=999
command -v perf >/dev/null || bash scripts/apt_install.sh profile linux-perf
start_server prof 25498 "synchronous_commit = off"
fill_finished 10000
read_script "$what" 10000 "$dir/script.sql"
"$PGBENCH" -n -M prepared -h "$dir" -p "$PORT" -U postgres -c "$clients" -j "$clients" -T 12 \
  -D scope=fin -D req="$BODY" -f "$dir/script.sql" postgres >"$dir/pgbench.out" 2>&1 &
bench=$!
# rate: prints pgbench's tps line (to the terminal) and its whole transactions a second (to stdout).
rate() { grep -E '^tps' "$dir/pgbench.out" >&2; sed -n 's/^tps = \([0-9]*\).*/\1/p' "$dir/pgbench.out"; }
sleep 3
if [ -n "${PROFILE_STAT:-}" ]; then
  backends=$(sql -c "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE application_name = 'pgbench'")
  [ -n "$backends" ] || { echo "profile_replay.sh: no pgbench backend found" >&2; exit 1; }
  perf stat -e task-clock -p "$backends" -o "$dir/backends.stat" -- sleep 4 >/dev/null 2>&1 &
  stat=$!
  perf stat -e task-clock -p "$bench" -o "$dir/pgbench.stat" -- sleep 4 >/dev/null 2>&1
  wait "$stat"
  wait "$bench"
  tps=$(rate)
  for who in backends pgbench; do
    awk -v who="$who" -v n=$((tps * 4)) '/task-clock/ { gsub(",", "", $1); printf "on-CPU per transaction, %s: %.1f µs\n", who, $1 * 1000 / n }' \
      "$dir/$who.stat"
  done
  exit 0
fi
if [ "$clients" -eq 1 ]; then
  pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
  perf record -F 1000 --call-graph dwarf,16384 -p "$pid" -o "$dir/perf.data" -- sleep 6 >/dev/null 2>&1
  wait "$bench"
  grep -E '^tps' "$dir/pgbench.out"
  perf report -i "$dir/perf.data" --children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | sed -n '1,120p'
  exit 0
fi
perf record -a -F "$freq" -o "$dir/perf.data" -- sleep 6 >/dev/null 2>&1
wait "$bench"
# Transactions during the recording: pgbench's steady rate times its 6 s (pg_stat_database's counter is
# flushed lazily, and not at all for SELECT 1).
n=$(($(rate) * 6))
echo "transactions during the 6 s recording: about $n"
perf report -i "$dir/perf.data" --sort comm,dso --stdio -F overhead,sample,comm,dso 2>/dev/null |
  awk -v n="$n" -v f="$freq" '/^ +[0-9.]+%/ && $2 > 0 { printf "%8.2f µs  %-12s %s\n", $2 / f * 1e6 / n, $3, $4 }' |
  sort -rn | sed -n '1,12p'
echo "--- the backends' top symbols (µs per transaction)"
perf report -i "$dir/perf.data" --comm postgres --sort dso,sym --stdio -F overhead,sample,dso,sym 2>/dev/null |
  awk -v n="$n" -v f="$freq" '/^ +[0-9.]+%/ && $2 > 0 { $1 = ""; s = $2; $2 = ""; printf "%7.3f µs %s\n", s / f * 1e6 / n, $0 }' |
  sort -rn | sed -n "1,${PROFILE_LINES:-60}p"
