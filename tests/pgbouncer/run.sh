#!/usr/bin/env bash
# idem_keys behind PgBouncer (Debian 12's 1.18) in transaction pooling mode, loopback only: the contract with
# psycopg (tests/pgbouncer/contract.py), then the Go, Python and Node services of the e2e suite through it.
# Needs tests/e2e/setup.sh first (the Python venv, the services) and the extension installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
pg_port=${PGB_PG_PORT:-25461} bouncer_port=${PGB_PORT:-25462}
work=$(mktemp -d /tmp/idem-pgb.XXXXXX)
chmod 755 "$work"
trap 'bash scripts/pgbouncer.sh stop "$work/bouncer"; bash scripts/cluster.sh stop "$work/pg"; rm -rf "$work"' EXIT

bash scripts/cluster.sh start "$work/pg" "$pg_port"
for db in shop trap; do
  psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1 -d postgres -c "CREATE DATABASE $db"
  psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION idem_keys"
done
# shop: 4 server connections for up to 16 clients; trap: 1, so that two clients share it for certain.
bash scripts/pgbouncer.sh start "$work/bouncer" "$bouncer_port" "$pg_port" shop:4 trap:1
echo "pgbouncer: $(pgbouncer --version | head -1) on 127.0.0.1:$bouncer_port, pool_mode = transaction"
timeout --kill-after=5 120 examples/python/.venv/bin/python -B tests/pgbouncer/contract.py \
  "postgres://postgres@127.0.0.1:$bouncer_port/shop" "postgres://postgres@127.0.0.1:$bouncer_port/trap"

echo "pgbouncer: the e2e services through PgBouncer"
E2E_PGBOUNCER=1 bash tests/e2e/run.sh
