#!/usr/bin/env bash
# The PL/Proxy router's hop cost: claim + finish of a new key, and the replay of a finished one, through a
# PL/Proxy router with idem_keys_proxy, as a ratio to the same calls made on a partition directly, in one run
# with interleaved rounds. Two partitions and the router, all on this machine (loopback, TCP from the router).
#   bash bench/scaleout.sh            BENCH_SECONDS (10), BENCH_ROUNDS (3), BENCH_CLIENTS ("1 8"), BENCH_KEYS (100000)
#   bash bench/scaleout.sh --smoke    2 s, 1 round, 1 and 4 clients, 2000 keys: that it runs, not a measurement
# Prints one line per round and a table of medians. Needs idem_keys and idem_keys_proxy installed, and plproxy.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
SECONDS_PER=${BENCH_SECONDS:-10} ROUNDS=${BENCH_ROUNDS:-3} CLIENTS=${BENCH_CLIENTS:-"1 8"} KEYS=${BENCH_KEYS:-100000}
if [ "${1:-}" = --smoke ]; then SECONDS_PER=2 ROUNDS=1 CLIENTS="1 4" KEYS=2000; fi
PGBENCH=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)/pgbench
port=${BENCH_SCALEOUT_PORT:-25900}
work=$(mktemp -d /tmp/idem-hop.XXXXXX)
chmod 755 "$work"
trap 'for d in router p0 p1; do bash scripts/cluster.sh stop "$work/$d"; done; rm -rf "$work"' EXIT
on() { local dir=$1 p=$2; shift 2; psql -X -q -At -h "$dir" -p "$p" -U postgres -v ON_ERROR_STOP=1 "$@"; }

for i in 0 1; do
  bash scripts/cluster.sh start "$work/p$i" $((port + 1 + i)) "max_connections = 40" "idem_keys.sweep_enabled = off"
  on "$work/p$i" $((port + 1 + i)) -d postgres -c "CREATE EXTENSION idem_keys" \
    -c "GRANT EXECUTE ON FUNCTION idem_stats(), idem_sweep(integer), idem_stale(interval, integer), idem_sweep_status() TO PUBLIC"
done
bash scripts/cluster.sh start "$work/router" "$port" "max_connections = 40"
on "$work/router" "$port" -d postgres -c "CREATE EXTENSION idem_keys_proxy CASCADE" 2>&1 | grep -v 'installing required' || true
on "$work/router" "$port" -d postgres \
  -c "CREATE SERVER idem_keys_cluster FOREIGN DATA WRAPPER plproxy OPTIONS (p0 'host=127.0.0.1 port=$((port + 1)) dbname=postgres', p1 'host=127.0.0.1 port=$((port + 2)) dbname=postgres')" \
  -c "CREATE USER MAPPING FOR postgres SERVER idem_keys_cluster OPTIONS (user 'postgres')"
# Finished keys 1..KEYS: through the router in scope fin (spread over both partitions), and on partition 0
# directly in scope fin0 (fin's keys there are the router's).
fill() { # DIR PORT SCOPE
  on "$1" "$2" -d postgres -v scope="$3" -v n="$KEYS" -v req="$BODY" -v resp="$RESP" <<'SQL' >/dev/null
SELECT count(idem_finish(:'scope', g::text, (idem_claim(:'scope', g::text, :'req'::jsonb)).token, 201, :'resp'::jsonb))
  FROM generate_series(1, :'n'::int) AS g;
SQL
}
fill "$work/router" "$port" fin
fill "$work/p0" $((port + 1)) fin0

{ echo '\set key random(1, 9000000000000000000)'; cat bench/scripts/idem/claim.pgbench bench/scripts/idem/finish.pgbench; } >"$work/new.pgbench"
{ echo "\\set key random(1, $KEYS)"; echo "SELECT (idem_claim(:rscope, :key::text, :req::jsonb)).outcome;"; } >"$work/replay.pgbench"
run() { # DIR PORT SCRIPT CLIENTS REPLAY_SCOPE: prints tps
  pgbench_tps "$1" "$2" "$4" postgres -T "$SECONDS_PER" -f "$work/$3.pgbench" -D scope=new -D rscope="$5" \
    -D req="$BODY" -D resp="$RESP" -D hdrs="$HDRS"
}
results=$work/results.tsv
for c in $CLIENTS; do
  for ((r = 1; r <= ROUNDS; r++)); do
    for w in new replay; do
      direct=$(run "$work/p0" $((port + 1)) "$w" "$c" fin0)
      routed=$(run "$work/router" "$port" "$w" "$c" fin)
      printf '%s\t%s\t%s\t%s\n' "$w" "$c" "$direct" "$routed" >>"$results"
      echo "round $r, $c clients, $w: direct $direct tps, through the router $routed tps"
    done
  done
done
python3 bench/medians.py "$results" direct "through the router"
