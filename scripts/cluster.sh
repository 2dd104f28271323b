#!/usr/bin/env bash
# Throwaway PostgreSQL clusters for the demo and the tests. initdb refuses root, so the server runs as the
# `postgres` user; root talks to it over the Unix socket in the cluster's own directory.
#   cluster.sh start DIR PORT [postgresql.conf line ...]   initdb (if needed) and start
#   cluster.sh stop DIR                                     stop fast, if running
#   cluster.sh immediate DIR                                stop without a shutdown checkpoint (a crash)
set -euo pipefail
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
# From /: a checkout the postgres user cannot enter (a root user's clone in /root, a mktemp directory) would make
# every tool it runs print "could not change directory" first. So DIR is made absolute before.
as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else (cd / && sudo -u postgres "$@"); fi; }

case "${1:-}" in
  start)
    dir=$(realpath -m "$2") port=$3; shift 3
    mkdir -p "$dir"; chown postgres: "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_postgres "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >/dev/null
      {
        echo "port = $port"
        echo "unix_socket_directories = '$dir'"
        echo "listen_addresses = '127.0.0.1'"
        echo "timezone = 'UTC'"
        for line in "$@"; do echo "$line"; done
      } | as_postgres tee -a "$dir/data/postgresql.conf" >/dev/null
    fi
    as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
    ;;
  stop)
    dir=$(realpath -m "$2")
    if [ -f "$dir/data/postmaster.pid" ]; then
      as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    ;;
  immediate)
    as_postgres "$bin/pg_ctl" -D "$(realpath -m "$2")/data" -m immediate -w stop >/dev/null
    ;;
  *) echo "usage: $0 start DIR PORT [conf...] | stop DIR | immediate DIR" >&2; exit 2 ;;
esac
