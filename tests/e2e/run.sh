#!/usr/bin/env bash
# The e2e suite: the Go, Python and Node payment services in examples/ attacked the same way (tests/e2e/attack.py)
# against a fresh throwaway PostgreSQL with idem_keys. Loopback only. Needs tests/e2e/setup.sh first and the
# extension installed. Usage: run.sh [go] [python] [node]   (default: all three); E2E_PORTABLE=1 (below) runs
# them against the portable edition instead.
# Ports: E2E_PG_PORT (default 25432) and E2E_HTTP_PORT (default 25480: the provider; the services take the next
# three). Both below Linux's ephemeral range (32768-60999): the thousands of client connections the attack opens
# could otherwise hold a port a restarted service needs to bind.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
pg_port=${E2E_PG_PORT:-25432}
http_port=${E2E_HTTP_PORT:-25480}
start=$SECONDS

work=$(mktemp -d /tmp/idem-e2e.XXXXXX)
chmod 755 "$work" # the server runs as postgres and needs to reach its directory inside
cleanup() {
  # attack.py stops what it starts; this is for when it could not (killed, timed out). Only our own processes:
  # a listed pid is killed only if it still runs one of the examples.
  kill_listed "$work/pids" examples/
  bash scripts/pgbouncer.sh stop "$work/bouncer"
  bash scripts/cluster.sh stop "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT

bash scripts/cluster.sh start "$work/pg" "$pg_port"
psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE shop"
# The services connect as postgres: a superuser, because their reconciler calls idem_stale, which is revoked from
# PUBLIC. A real deployment grants EXECUTE on idem_stale to the reconciler's role instead.
# E2E_PORTABLE=1: the portable edition instead of the extension, installed by the database's owner, who is
# not a superuser (docs/portable.md).
if [ "${E2E_PORTABLE:-}" = 1 ]; then
  python3 scripts/portable.py "$work/idem_keys_portable.sql" >/dev/null
  chmod 644 "$work/idem_keys_portable.sql"
  psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1 -d postgres \
    -c "CREATE ROLE shop_owner LOGIN" -c "ALTER DATABASE shop OWNER TO shop_owner"
  psql -h "$work/pg" -p "$pg_port" -U shop_owner -XqAt -v ON_ERROR_STOP=1 -d shop -f "$work/idem_keys_portable.sql"
  echo "e2e: PostgreSQL on 127.0.0.1:$pg_port with idem_keys' portable edition $(psql -h "$work/pg" -p "$pg_port" \
    -U postgres -XqAt -d shop -c "SELECT idem_keys_portable_version()"), installed by shop_owner (not a superuser)"
else
  psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1 -d shop -c "CREATE EXTENSION idem_keys"
  echo "e2e: PostgreSQL on 127.0.0.1:$pg_port with idem_keys $(psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -d shop \
    -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'")"
fi

# E2E_PGBOUNCER=1: the services connect through PgBouncer in transaction pooling mode (scripts/pgbouncer.sh),
# 4 server connections for their 3 × 16 pooled clients, with each driver set up for it; the harness's own
# checks still go straight to the server.
pooled=()
if [ "${E2E_PGBOUNCER:-}" = 1 ]; then
  bouncer_port=$((pg_port + 1))
  bash scripts/pgbouncer.sh start "$work/bouncer" "$bouncer_port" "$pg_port" shop:4
  echo "e2e: the services connect through PgBouncer $(pgbouncer --version | head -1 | cut -d' ' -f2) on 127.0.0.1:$bouncer_port, pool_mode = transaction"
  pooled=(--service-database-url "postgres://postgres@127.0.0.1:$bouncer_port/shop" --transaction-pooler)
fi

# A hard stop well inside CI's budget, whatever hangs.
timeout --kill-after=10 540 python3 -B tests/e2e/attack.py \
  --database-url "postgres://postgres@127.0.0.1:$pg_port/shop" "${pooled[@]}" --workdir "$work" --base-port "$http_port" "$@"
echo "e2e: total $((SECONDS - start)) s"
