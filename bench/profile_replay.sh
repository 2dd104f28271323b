#!/usr/bin/env bash
# Where a replay's time goes (issue 19): perf on the one backend that serves a 1-client pgbench replaying
# finished keys, call graphs by DWARF (Debian's PostgreSQL has no frame pointers), children included.
#   bash bench/profile_replay.sh [SCRIPT]   SCRIPT: replay (default), lookup or floor; needs linux-perf
# Prints perf's children view of the backend; docs/benchmarks.md groups it into layers.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
what=${1:-replay}
command -v perf >/dev/null || bash scripts/apt_install.sh profile linux-perf
dir=$(mktemp -d /tmp/idem-prof.XXXXXX) port=25498
trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
bash scripts/cluster.sh start "$dir" "$port" "synchronous_commit = off" "shared_buffers = 512MB"
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"; }
sql -c "CREATE EXTENSION idem_keys"
sql -c "DO \$\$ DECLARE t bigint; BEGIN FOR i IN 1..10000 LOOP
          t := (idem_claim('s', 'k' || i, '{\"a\": 1}'::jsonb)).token;
          PERFORM idem_finish('s', 'k' || i, t, 200, '{\"id\": \"ch_1234567890\", \"status\": \"ok\"}'::jsonb);
        END LOOP; END \$\$" -c "VACUUM ANALYZE idem_keys"
case $what in
  replay) printf '\\set k random(1, 10000)\nSELECT (idem_claim(%s, %s, %s)).outcome;\n' "'s'" "'k' || :k" "'{\"a\": 1}'::jsonb" ;;
  lookup) printf '\\set k random(1, 10000)\nSELECT (idem_lookup(%s, %s)).outcome;\n' "'s'" "'k' || :k" ;;
  floor) echo 'SELECT 1;' ;;
  *) echo "usage: $0 [replay|lookup|floor]" >&2; exit 2 ;;
esac >"$dir/script.sql"
"$("$PG_CONFIG" --bindir)/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c 1 -j 1 -T 12 \
  -f "$dir/script.sql" postgres >"$dir/pgbench.out" 2>&1 &
sleep 2
pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
perf record -F 1000 --call-graph dwarf,16384 -p "$pid" -o "$dir/perf.data" -- sleep 6 >/dev/null 2>&1
wait
grep -E '^tps' "$dir/pgbench.out"
perf report -i "$dir/perf.data" --children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -80
