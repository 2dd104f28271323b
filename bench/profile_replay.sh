#!/usr/bin/env bash
# Where a replay's time goes (issue 19): perf on the one backend that serves a 1-client pgbench replaying
# the bench's finished keys (its request and ~200-byte answer, bench/common.sh), call graphs by DWARF
# (Debian's PostgreSQL has no frame pointers), children included.
#   bash bench/profile_replay.sh [replay|lookup|floor]   default replay; installs linux-perf if missing
# Prints pgbench's tps and perf's children view of the backend; docs/benchmarks.md groups it into layers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
source bench/common.sh
what=${1:-replay}
command -v perf >/dev/null || bash scripts/apt_install.sh profile linux-perf
start_server prof 25498 "synchronous_commit = off"
sql -v req="$BODY" -v resp="$RESP" -v hdrs="$HDRS" <<'SQL'
CALL bench.populate('public.idem_keys', 'finished', 'fin', 1, 10000, :'req', :'resp', :'hdrs');
VACUUM ANALYZE public.idem_keys;
SQL
case $what in
  replay) echo 'SELECT (idem_claim(:scope, :key::text, :req::jsonb)).outcome;' ;;
  lookup) echo 'SELECT (idem_lookup(:scope, :key::text)).outcome;' ;;
  floor) echo 'SELECT 1;' ;;
  *) echo "usage: $0 [replay|lookup|floor]" >&2; exit 2 ;;
esac | { echo '\set key random(1, 10000)'; cat; } >"$dir/script.sql"
"$PGBENCH" -n -M prepared -h "$dir" -p "$PORT" -U postgres -c 1 -j 1 -T 12 -D scope=fin -D req="$BODY" \
  -f "$dir/script.sql" postgres >"$dir/pgbench.out" 2>&1 &
sleep 2
pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
perf record -F 1000 --call-graph dwarf,16384 -p "$pid" -o "$dir/perf.data" -- sleep 6 >/dev/null 2>&1
wait
grep -E '^tps' "$dir/pgbench.out"
perf report -i "$dir/perf.data" --children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -120
