#!/usr/bin/env bash
# The hop to the keys on more than one machine, in one run with interleaved rounds: claim + finish of a new key,
# the replay of a finished one, and a call of a function that does nothing (the hop alone), made
#   - on one server with idem_keys (direct, the baseline),
#   - through a Citus coordinator with two workers (scripts/citus.sh: the verbs delegated to the scope's worker),
#   - through a PL/Proxy router with two partitions (idem_keys_proxy),
# each as a ratio to direct. Everything on this machine: loopback TCP between nodes, the same settings.
#   bash bench/citus.sh            BENCH_SECONDS (10), BENCH_ROUNDS (3), BENCH_CLIENTS ("1 8"), BENCH_KEYS (100000),
#                                  BENCH_CITUS_SETTING (below)
#   bash bench/citus.sh --smoke    2 s, 1 round, 1 and 4 clients, 2000 keys: that it runs, not a measurement
# Needs PostgreSQL 16-18 with idem_keys, Citus (scripts/citus.sh ensure), idem_keys_proxy and plproxy installed.
# Prints one line per round and a table of medians.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
SECONDS_PER=${BENCH_SECONDS:-10} ROUNDS=${BENCH_ROUNDS:-3} CLIENTS=${BENCH_CLIENTS:-"1 8"} KEYS=${BENCH_KEYS:-100000}
if [ "${1:-}" = --smoke ]; then SECONDS_PER=2 ROUNDS=1 CLIENTS="1 4" KEYS=2000; fi
port=${BENCH_CITUS_PORT:-25940} # Citus: port..port+2; direct: port+5; router: port+6; partitions: port+7, port+8
work=$(mktemp -d /tmp/idem-citusb.XXXXXX)
chmod 755 "$work"
cleanup() {
  bash scripts/citus.sh stop "$work/citus"
  for d in direct router p0 p1; do bash scripts/cluster.sh stop "$work/$d"; done
  rm -rf "$work"
}
trap cleanup EXIT
on() { local p=$1; shift; psql -X -q -At -h 127.0.0.1 -p "$p" -U postgres -v ON_ERROR_STOP=1 "$@"; }
# The same settings everywhere: what scripts/citus.sh gives its nodes, the sweeper off (it would only add noise),
# and synchronous_commit off on every server: the one-server baseline runs with it off (PGOPTIONS below), and a
# session setting does not travel with a call that Citus or PL/Proxy sends to another node.
settings=("max_connections = 100" "idem_keys.sweep_enabled = off" "shared_buffers = 512MB" "max_wal_size = 4GB"
          "synchronous_commit = off")

# BENCH_CITUS_SETTING: one more line for the Citus nodes only ("idem_keys.direct_path = off" measures the verbs'
# statements routed by Citus on the worker, as before the direct path wrote the shard).
# Citus's connections between its nodes without TLS, as PL/Proxy's to its partitions here (Citus's default is
# sslmode=require; BENCH_CITUS_SETTING="citus.node_conninfo = 'sslmode=require'" measures it).
CITUS_SETTINGS=$(printf '%s\n' "${settings[@]}" "citus.node_conninfo = 'sslmode=disable'" "${BENCH_CITUS_SETTING:-}") \
  bash scripts/citus.sh start "$work/citus" "$port" >/dev/null
bash scripts/cluster.sh start "$work/direct" $((port + 5)) "shared_preload_libraries = 'idem_keys'" "${settings[@]}"
on $((port + 5)) -d postgres -c "CREATE DATABASE idem" -c "\\c idem" -c "CREATE EXTENSION idem_keys"
for i in 0 1; do
  bash scripts/cluster.sh start "$work/p$i" $((port + 7 + i)) "shared_preload_libraries = 'idem_keys'" "${settings[@]}"
  on $((port + 7 + i)) -d postgres -c "CREATE DATABASE idem" -c "\\c idem" -c "CREATE EXTENSION idem_keys"
done
bash scripts/cluster.sh start "$work/router" $((port + 6)) "${settings[@]}"
on $((port + 6)) -d postgres -c "CREATE DATABASE idem" -c "\\c idem" -c "CREATE EXTENSION idem_keys_proxy CASCADE" 2>&1 \
  | grep -v 'installing required' || true
on $((port + 6)) -d idem \
  -c "CREATE SERVER idem_keys_cluster FOREIGN DATA WRAPPER plproxy OPTIONS (p0 'host=127.0.0.1 port=$((port + 7)) dbname=idem', p1 'host=127.0.0.1 port=$((port + 8)) dbname=idem')" \
  -c "CREATE USER MAPPING FOR postgres SERVER idem_keys_cluster OPTIONS (user 'postgres')"

# Finished keys 1..KEYS, key k in scope k % 64: through Citus and the router the scopes spread over the nodes
# (Citus places a whole scope on one shard).
fill() { # PORT
  on "$1" -d idem -v n="$KEYS" -v req="$BODY" -v resp="$RESP" <<'SQL' >/dev/null
SELECT count(d.f) FROM generate_series(1, :'n'::int) AS g,
       LATERAL (SELECT token FROM idem_claim((g % 64)::text, g::text, :'req'::jsonb)) AS c,
       LATERAL (SELECT idem_finish((g % 64)::text, g::text, c.token, 201, :'resp'::jsonb) AS f) AS d;
SQL
}
for p in $((port + 5)) "$port" $((port + 6)); do fill "$p"; done

# The hop alone: a function that does nothing, called the same way, routed the same way (Citus: delegated to
# the scope's worker; PL/Proxy: run on the scope's partition). No call through a hop can be faster than it.
noop="CREATE FUNCTION bench_hop(scope text) RETURNS int LANGUAGE plpgsql AS 'BEGIN RETURN 1; END'"
for p in $((port + 5)) "$port" $((port + 7)) $((port + 8)); do on "$p" -d idem -c "$noop"; done
on "$port" -d idem -c "SELECT create_distributed_function('bench_hop(text)', 'scope', colocate_with => 'idem_keys')" >/dev/null
on $((port + 6)) -d idem -c "CREATE FUNCTION bench_hop(scope text) RETURNS int LANGUAGE plproxy AS
  \$\$ CLUSTER 'idem_keys_cluster'; RUN ON hashtext(scope); \$\$"

# The calls as an application makes them, `SELECT … FROM verb(…)` with the scope a bound parameter (Citus
# delegates that form; docs/scale-out.md). New keys go to the same 64 scopes.
{ echo '\set key random(1, 9000000000000000000)'; echo '\set s random(0, 63)';
  sed 's/:scope/:s::text/g' bench/scripts/idem/claim.pgbench bench/scripts/idem/finish.pgbench; } >"$work/new.pgbench"
{ echo "\\set key random(1, $KEYS)"; echo '\set s :key % 64'
  echo "SELECT outcome FROM idem_claim(:s::text, :key::text, :req::jsonb);"; } >"$work/replay.pgbench"
{ echo '\set s random(0, 63)'; echo "SELECT * FROM bench_hop(:s::text);"; } >"$work/hop.pgbench"
run() { # PORT SCRIPT CLIENTS: prints tps
  pgbench_tps 127.0.0.1 "$1" "$3" idem -T "$SECONDS_PER" -f "$work/$2.pgbench" -D req="$BODY" -D resp="$RESP" -D hdrs="$HDRS"
}
results=$work/results.tsv
for c in $CLIENTS; do
  for ((r = 1; r <= ROUNDS; r++)); do
    for w in new replay hop; do
      direct=$(run $((port + 5)) "$w" "$c")
      citus=$(run "$port" "$w" "$c")
      routed=$(run $((port + 6)) "$w" "$c")
      printf '%s\t%s\t%s\t%s\t%s\n' "$w" "$c" "$direct" "$citus" "$routed" >>"$results"
      echo "round $r, $c clients, $w: direct $direct tps, Citus $citus tps, PL/Proxy $routed tps"
    done
  done
done
python3 bench/medians.py "$results" "one server" Citus PL/Proxy
