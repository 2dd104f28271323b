#!/usr/bin/env bash
# Two more drivers against a real server, loopback only: Java over JDBC (Debian's pgjdbc, no Maven) and Python's
# asyncpg (binary protocol, idem_result decoded as a composite). Installs what is missing; needs the extension
# installed. Each test prints one line per check and fails the stage on any FAIL.
set -euo pipefail
cd "$(dirname "$0")/../.."
port=${DRIVERS_PG_PORT:-25471}
bash scripts/apt_install.sh drivers default-jdk-headless libpostgresql-jdbc-java python3-venv
venv=tests/drivers/.venv
bash scripts/python_venv.sh drivers "$venv" tests/drivers/requirements.txt

work=$(mktemp -d /tmp/idem-drivers.XXXXXX)
chmod 755 "$work"
trap 'bash scripts/cluster.sh stop "$work/pg"; rm -rf "$work"' EXIT
bash scripts/cluster.sh start "$work/pg" "$port"
psql -h "$work/pg" -p "$port" -U postgres -XqAt -v ON_ERROR_STOP=1 -d postgres -c "CREATE EXTENSION idem_keys"

echo "drivers: pgjdbc $(dpkg-query -W -f='${Version}' libpostgresql-jdbc-java), $(java -version 2>&1 | head -1)"
timeout 120 java -cp /usr/share/java/postgresql.jar tests/drivers/Contract.java \
  "jdbc:postgresql://127.0.0.1:$port/postgres?user=postgres"
echo "drivers: asyncpg $("$venv/bin/python" -c 'import asyncpg; print(asyncpg.__version__)')"
timeout 120 "$venv/bin/python" -B tests/drivers/asyncpg_contract.py "postgres://postgres@127.0.0.1:$port/postgres"
