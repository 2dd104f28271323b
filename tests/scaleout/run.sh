#!/usr/bin/env bash
# Scale-out through a PL/Proxy router, loopback only: four partitions (four PostgreSQL servers with idem_keys, each admitting
# only the router's role over TCP) and a router (PL/Proxy + idem_keys_proxy, server idem_keys_cluster):
#   1. a partition on another idem_keys version makes idem_cluster_status fail (55000) until it is updated;
#   2. tests/scaleout/checks.py: the contract, the spread of one large scope, every error a router can meet
#      (as one node gives it), the fan-out verbs, the operator check, security;
#   3. the JDBC and asyncpg contract tests, then the e2e attack of the Go, Python and Node services, against
#      the router;
#   4. a partition stops in the middle of a retry storm (tests/failover/storm.py): its keys fail with 08006
#      within connect_timeout, the others go on; after it restarts the storm completes, every answer replays,
#      charges equal payments.
# Needs the extension and idem_keys_proxy installed, tests/e2e/setup.sh and the drivers' setup. Bounded.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=scaleout; source tests/lib.sh
port=${SCALEOUT_PORT:-25810} http_port=${SCALEOUT_HTTP_PORT:-25880}
work=$(mktemp -d /tmp/idem-scale.XXXXXX)
chmod 755 "$work"
partitions=(0 1 2 3)
storm=""
# The frozen 0.3.0 install script, for the partition that starts one release behind.
install -m 644 sql/idem_keys--0.3.0.sql "$("${PG_CONFIG:-/usr/bin/pg_config}" --sharedir)/extension/"
cleanup() {
  # A storm still running (a check failed while it ran) stops first: it holds ports and child processes.
  stop_child "$storm"
  bash scripts/cluster.sh stop "$work/router"
  for i in "${partitions[@]}"; do bash scripts/cluster.sh stop "$work/p$i"; done
  rm -rf "$work"
}
trap cleanup EXIT
on() { sql_at "$@"; }
router() { on "$work/router" "$port" -d shop "$@"; }
part() { local i=$1; shift; on "$work/p$i" $((port + 1 + i)) -d shop "$@"; }

# --- The partitions: idem_keys and its sweeper each; TCP only for the router's role (trust on loopback here;
# scram-sha-256 with the router's passfile in production, docs/scale-out.md).
for i in "${partitions[@]}"; do
  bash scripts/cluster.sh start "$work/p$i" $((port + 1 + i)) "shared_preload_libraries = 'idem_keys'" \
    "idem_keys.sweep_databases = 'shop'"
  printf '%s\n' "local all postgres trust" "host shop,reshard idem_router 127.0.0.1/32 trust" "host all all 127.0.0.1/32 reject" \
    "host all all ::1/128 reject" | sudo -u postgres tee "$work/p$i/data/pg_hba.conf" >/dev/null
  on "$work/p$i" $((port + 1 + i)) -d postgres -c "SELECT pg_reload_conf()" -c "CREATE ROLE idem_router LOGIN" \
    -c "CREATE DATABASE shop" >/dev/null
  # Partition 3 starts one release behind, for the version check below.
  version=""; [ "$i" = 3 ] && version="VERSION '0.3.0'"
  for db in shop reshard; do
    [ "$db" = shop ] || on "$work/p$i" $((port + 1 + i)) -d postgres -c "CREATE DATABASE $db"
    on "$work/p$i" $((port + 1 + i)) -d "$db" -c "CREATE EXTENSION idem_keys $version" \
      -c "GRANT EXECUTE ON FUNCTION idem_stats(), idem_sweep(integer), idem_stale(interval, integer), idem_sweep_status() TO idem_router"
  done
done
part 3 -d reshard -c "ALTER EXTENSION idem_keys UPDATE" # only shop's partition 3 stays behind, for step 1

# --- The router.
bash scripts/cluster.sh start "$work/router" "$port"
on "$work/router" "$port" -d postgres -c "CREATE DATABASE shop" -c "CREATE ROLE app LOGIN"
router -c "CREATE EXTENSION idem_keys_proxy CASCADE" 2>&1 | grep -v 'installing required extension' || true
opts=()
for i in "${partitions[@]}"; do opts+=("p$i 'host=127.0.0.1 port=$((port + 1 + i)) dbname=shop connect_timeout=2'"); done
router -c "CREATE SERVER idem_keys_cluster FOREIGN DATA WRAPPER plproxy OPTIONS ($(IFS=,; echo "${opts[*]}"))" \
  -c "CREATE USER MAPPING FOR postgres SERVER idem_keys_cluster OPTIONS (user 'idem_router')"
echo "scaleout: router on 127.0.0.1:$port with PL/Proxy $(router -c "SELECT extversion FROM pg_extension WHERE extname = 'plproxy'") and idem_keys_proxy $(router -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys_proxy'"), ${#partitions[@]} partitions"

# The previous idem_keys_proxy, updated, is the fresh one: every function's definition, comment and privileges.
proxy_catalog() {
  on "$work/router" "$port" -d "$1" -At -c "SELECT p.oid::regprocedure || ' ' || md5(pg_get_functiondef(p.oid)) || ' ' ||
      coalesce(obj_description(p.oid, 'pg_proc'), '-') || ' ' || coalesce(p.proacl::text, '-')
    FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
   WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idem_keys_proxy') ORDER BY 1"
}
on "$work/router" "$port" -d postgres -c "CREATE DATABASE proxy_updated"
on "$work/router" "$port" -d proxy_updated -c "SET client_min_messages = warning" \
  -c "CREATE EXTENSION idem_keys_proxy VERSION '0.4.0' CASCADE" -c "ALTER EXTENSION idem_keys_proxy UPDATE"
diff <(proxy_catalog shop) <(proxy_catalog proxy_updated) || fail "idem_keys_proxy 0.4.0 updated differs from a fresh install (above)"
echo "PASS  idem_keys_proxy 0.4.0 -> $(router -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys_proxy'"): $(proxy_catalog shop | wc -l) functions equal to a fresh install"

# 1. The version check.
got=$(router -v VERBOSITY=sqlstate -c "SELECT count(*) FROM idem_cluster_status()" 2>&1 || true)
grep -q "55000" <<<"$got" || fail "a partition on 0.3.0 did not make idem_cluster_status fail with 55000: $got"
got=$(router -c "SELECT count(*) FROM idem_cluster_status()" 2>&1 || true)
grep -q "partition 3: 0.3.0" <<<"$got" || fail "the version error does not name the partition on 0.3.0: $got"
part 3 -c "ALTER EXTENSION idem_keys UPDATE"
current=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)
[ "$(router -c "SELECT string_agg(version, ',') FROM idem_cluster_status()")" = "$current,$current,$current,$current" ] \
  || fail "idem_cluster_status after the update"
echo "PASS  a partition on 0.3.0 is a 55000 from idem_cluster_status naming it; after ALTER EXTENSION UPDATE all agree"

# 2. The checks.
router_url="postgres://postgres@127.0.0.1:$port/shop"
part_urls=()
for i in "${partitions[@]}"; do part_urls+=("postgresql://postgres@/shop?host=$work/p$i&port=$((port + 1 + i))"); done
# The router's own checks go over TCP: the default pg_hba of the router admits app there.
timeout --kill-after=5 180 examples/python/.venv/bin/python -B tests/scaleout/checks.py "$router_url" \
  "postgres://app@127.0.0.1:$port/shop" "${part_urls[@]}"
for i in "${partitions[@]}"; do
  got=$(psql -X -At "postgres://app@127.0.0.1:$((port + 1 + i))/shop" -c "SELECT 1" 2>&1 || true)
  grep -q 'no pg_hba.conf entry\|rejects connection' <<<"$got" || fail "partition $i admitted an application role: $got"
done
echo "PASS  the partitions refuse every role but the router's"

# 25006: a partition that turned read-only (a demoted primary that the server still lists) refuses writes
# through the router as it refuses them to a client of its own.
end_router_sessions() { part "$1" -c "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity WHERE usename = 'idem_router'" >/dev/null; }
k1=$(router -c "SELECT min(k) FROM (SELECT 'k' || n AS k FROM generate_series(1, 200) AS n
  WHERE (idem_keys_proxy.route('ro', 'k' || n)::bigint & 3) = 1) AS s")
part 1 -c "ALTER ROLE idem_router SET default_transaction_read_only = on"
end_router_sessions 1
routed=$(router -c "SELECT (idem_claim('ro', '$k1', '{}'::jsonb)).outcome" 2>&1 | head -1 || true)
direct=$(part 1 -c "SET default_transaction_read_only = on" -c "SELECT (idem_claim('ro', '$k1', '{}'::jsonb)).outcome" 2>&1 | head -1 || true)
state=$(router -v VERBOSITY=sqlstate -c "SELECT (idem_claim('ro', '$k1', '{}'::jsonb)).outcome" 2>&1 || true)
part 1 -c "ALTER ROLE idem_router RESET default_transaction_read_only"
end_router_sessions 1
grep -q 25006 <<<"$state" && [ "$routed" = "$direct" ] || fail "a read-only partition: '$state' / '$routed', one node: '$direct'"
echo "PASS  error 25006 from a read-only partition, as one node gives it: $routed"

# 3. The drivers' contract tests and the e2e services, against the router.
echo "scaleout: the JDBC and asyncpg contract tests through the router"
timeout 120 java -cp /usr/share/java/postgresql.jar tests/drivers/Contract.java "jdbc:postgresql://127.0.0.1:$port/shop?user=postgres"
timeout 120 tests/drivers/.venv/bin/python -B tests/drivers/asyncpg_contract.py "$router_url"
echo "scaleout: the e2e services through the router"
mkdir -p "$work/e2e"
timeout --kill-after=10 300 python3 -B tests/e2e/attack.py --database-url "$router_url" --workdir "$work/e2e" \
  --base-port "$http_port"

# 4. A partition stops in the middle of a retry storm.
echo "scaleout: partition 2 stops in the middle of a retry storm"
mkdir -p "$work/storm"
timeout --kill-after=10 400 examples/python/.venv/bin/python -B tests/failover/storm.py --scenario partition \
  --database-url "$router_url" --workdir "$work/storm" --base-port $((http_port + 10)) --stop-file "$work/storm/stop" \
  --max-pause 3 --expect-error "sql 08006" &
storm=$!
sleep 6
bash scripts/cluster.sh immediate "$work/p2"
stopped=$SECONDS
# Its keys fail fast with 08006; a key elsewhere is served.
read -r k2 k0 < <(router -F ' ' -c "SELECT min(k) FILTER (WHERE p = 2), min(k) FILTER (WHERE p = 0)
  FROM (SELECT 'k' || n AS k, (idem_keys_proxy.route('probe', 'k' || n)::bigint & 3) AS p FROM generate_series(1, 200) AS n) AS s")
start=$(date +%s%N)
got=$(router -v VERBOSITY=sqlstate -c "SELECT (idem_claim('probe', '$k2', '{}'::jsonb)).outcome" 2>&1 || true)
took=$((($(date +%s%N) - start) / 1000000))
grep -q "08006" <<<"$got" || fail "a key on the stopped partition got '$got', not 08006"
# What the caller reads names no host, port or role; the router's log has it for the operator.
said=$(router -c "SELECT (idem_claim('probe', '$k2', '{}'::jsonb)).outcome" 2>&1 || true)
grep -q "unreachable" <<<"$said" && ! grep -qE "127\.0\.0\.1|port [0-9]|port=|idem_router|host=" <<<"$said" \
  || fail "the 08006 a caller reads gives connection details away: $said"
grep -q "idem_keys_proxy: a partition is unreachable: .*$((port + 3))" "$work/router/server.log" \
  || fail "the router's log does not say which partition was unreachable"
# A fingerprint needs no partition: with one down every call answers, with the partitions' own bytes.
fp=$(part 0 -c "SELECT encode(idem_fingerprint('{\"a\": 1.0, \"b\": [true]}'::jsonb), 'hex') || encode(idem_fingerprint('\\x0001'::bytea), 'hex')")
for n in $(seq 1 20); do
  [ "$(router -c "SELECT encode(idem_fingerprint('{\"a\": 1.0, \"b\": [true]}'::jsonb), 'hex') || encode(idem_fingerprint('\\x0001'::bytea), 'hex')")" = "$fp" ] \
    || fail "idem_fingerprint through the router with a partition down: call $n"
done
((took < 3000)) || fail "the stopped partition's key took $took ms to fail (connect_timeout is 2 s)"
[ "$(router -c "SELECT (idem_claim('probe', '$k0', '{}'::jsonb)).outcome")" = claimed ] || fail "a key on partition 0 failed too"
echo "PASS  with partition 2 down its keys fail with 08006 in $took ms (no connection details in it: $(grep -m1 DETAIL <<<"$said"));" \
     "partition 0's are served; 20 idem_fingerprint calls answered, equal to a partition's"
sleep $((6 - (SECONDS - stopped) > 0 ? 6 - (SECONDS - stopped) : 0))
bash scripts/cluster.sh start "$work/p2" $((port + 3))
sleep 6
touch "$work/storm/stop"
wait "$storm" || fail "the storm across a stopped partition failed its checks"
storm=""
# 5. Resharding from 2 to 4 partitions under a retry storm (database reshard: its own router database and
#    server, on the same four servers).
echo "scaleout: resharding 2 -> 4 partitions under a retry storm"
on "$work/router" "$port" -d postgres -c "CREATE DATABASE reshard"
rs() { on "$work/router" "$port" -d reshard "$@"; }
rs -c "CREATE EXTENSION idem_keys_proxy CASCADE" 2>&1 | grep -v 'installing required extension' || true
conn() { echo "host=127.0.0.1 port=$((port + 1 + $1)) dbname=reshard connect_timeout=2"; }
rs -c "CREATE SERVER idem_keys_cluster FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '$(conn 0)', p1 '$(conn 1)')" \
  -c "CREATE USER MAPPING FOR postgres SERVER idem_keys_cluster OPTIONS (user 'idem_router')"
rs_url="postgres://postgres@127.0.0.1:$port/reshard"
# A claim whose key moves (to partition 2 or 3), with a short lease: after the move its token must still fence.
# Its partition's sequence goes far ahead first, so that only carrying the sequence over (reshard.sh step 3)
# gives the recovering claim a newer token; the storm alone would not draw that many.
read -r fenced from < <(rs -F ' ' -c "SELECT k, (idem_keys_proxy.route('fence', k)::bigint & 1)
  FROM (SELECT 'k' || n AS k FROM generate_series(1, 100) AS n) AS s
 WHERE (idem_keys_proxy.route('fence', k)::bigint & 3) >= 2 LIMIT 1")
on "$work/p$from" $((port + 1 + from)) -d reshard -c "SELECT setval('idem_keys_token_seq', 1000000)" >/dev/null
token=$(rs -c "SELECT (idem_claim('fence', '$fenced', '{}'::jsonb, lease => '2 seconds')).token")
((token > 1000000)) || fail "the fenced claim's token $token is not from the advanced sequence"
mkdir -p "$work/reshard-storm"
timeout --kill-after=10 400 examples/python/.venv/bin/python -B tests/failover/storm.py --scenario reshard \
  --database-url "$rs_url" --workdir "$work/reshard-storm" --base-port $((http_port + 20)) \
  --stop-file "$work/reshard-storm/stop" &
storm=$!
sleep 6
admins=()
for i in "${partitions[@]}"; do admins+=("postgresql://postgres@/reshard?host=$work/p$i&port=$((port + 1 + i))"); done
bash scripts/reshard.sh "$rs_url" "${admins[@]}" -- "$(conn 2)" "$(conn 3)"
sleep 6
touch "$work/reshard-storm/stop"
wait "$storm" || fail "the storm across the resharding failed its checks"
storm=""
# Every key on exactly one partition, the one the router routes it to; the new partitions hold keys.
placed=""
for i in "${partitions[@]}"; do
  misplaced=$(on "$work/p$i" $((port + 1 + i)) -d reshard -c "SELECT count(*) FROM idem_keys
    WHERE (hashtext(length(scope)::text || ':' || scope || key)::bigint & 3) <> $i")
  [ "$misplaced" = 0 ] || fail "partition $i holds $misplaced keys that belong elsewhere"
  on "$work/p$i" $((port + 1 + i)) -d reshard -c "COPY (SELECT scope, key FROM idem_keys) TO STDOUT" >"$work/keys.$i"
  [ -s "$work/keys.$i" ] || fail "partition $i holds no keys after the move"
  placed+=" $(wc -l <"$work/keys.$i")"
done
twice=$(cat "$work"/keys.* | sort | uniq -d | wc -l)
[ "$twice" = 0 ] || fail "$twice keys are on two partitions: $(cat "$work"/keys.* | sort | uniq -d | head -3)"
echo "PASS  after resharding every key is on exactly one partition, the one it routes to (keys per partition:$placed)"
sleep 2 # the fenced claim's lease runs out
read -r outcome newtoken < <(rs -F ' ' -c "SELECT outcome, token FROM idem_claim('fence', '$fenced', '{}'::jsonb)")
[ "$outcome" = recovered ] && ((newtoken > token)) || fail "the moved claim came back '$outcome' with token $newtoken (was $token)"
got=$(rs -v VERBOSITY=sqlstate -c "SELECT idem_finish('fence', '$fenced', $token, 200, ''::bytea)" 2>&1 || true)
grep -q 55000 <<<"$got" || fail "the old token finished the moved key after it was recovered: $got"
echo "PASS  a claim moved by the resharding is recovered with a newer token ($token -> $newtoken), and the old one is refused (55000)"
echo "scaleout: all passed"
