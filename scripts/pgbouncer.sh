#!/usr/bin/env bash
# Throwaway PgBouncers in transaction pooling mode, in front of the throwaway servers of scripts/cluster.sh.
# PgBouncer refuses to run as root, so it runs as postgres, like the servers. Loopback only, trust auth.
#   pgbouncer.sh start DIR PORT PG_PORT DB[:POOL_SIZE]...   one pool per database DB on 127.0.0.1:PG_PORT
#   pgbouncer.sh stop DIR
# POOL_SIZE (default 4) is the server connections per database: fewer than the clients, so that clients
# really share them, which is what breaks a driver's named prepared statements and session settings.
set -euo pipefail
as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else sudo -u postgres "$@"; fi; }

case "${1:-}" in
  start)
    dir=$2 port=$3 pg_port=$4
    shift 4
    mkdir -p "$dir"
    {
      echo "[databases]"
      for db in "$@"; do
        echo "${db%%:*} = host=127.0.0.1 port=$pg_port dbname=${db%%:*} pool_size=$([[ $db == *:* ]] && echo "${db#*:}" || echo 4)"
      done
      cat <<EOF
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 500
admin_users = postgres
; JDBC and some pools send it at start-up; PgBouncer would refuse the connection otherwise.
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
    } >"$dir/pgbouncer.ini"
    echo '"postgres" ""' >"$dir/userlist.txt"
    chown -R postgres: "$dir"
    as_postgres pgbouncer -d "$dir/pgbouncer.ini"
    for _ in $(seq 50); do # bounded: 5 s
      if psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d pgbouncer -c 'SHOW VERSION' >/dev/null 2>&1; then exit 0; fi
      sleep 0.1
    done
    echo "pgbouncer.sh: PgBouncer did not come up on port $port; its log:" >&2
    cat "$dir/pgbouncer.log" >&2 || true
    exit 1
    ;;
  stop)
    dir=$2
    if [ -f "$dir/pgbouncer.pid" ]; then
      pid=$(cat "$dir/pgbouncer.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
      rm -f "$dir/pgbouncer.pid"
    fi
    ;;
  *) echo "usage: $0 start DIR PORT PG_PORT DB[:POOL_SIZE]... | stop DIR" >&2; exit 2 ;;
esac
