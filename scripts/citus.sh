#!/usr/bin/env bash
# idem_keys on Citus, loopback only: a coordinator and two workers, with idem_keys distributed by scope.
#   citus.sh ensure                      build and install Citus 14.0.1 for PG_CONFIG's major, if missing
#   citus.sh start DIR PORT [portable]   coordinator on 127.0.0.1:PORT, workers on PORT+1 and PORT+2; database
#                                        `idem` with idem_keys (or the portable edition) installed and
#                                        distributed (citus/idem_keys_distribute.sql), usable by `postgres` and by
#                                        the application role `idem_app`
#   citus.sh add DIR PORT                a third worker on PORT, added to the cluster, shards not yet moved
#   citus.sh stop DIR                    stops every node under DIR
# Citus supports PostgreSQL 16, 17 and 18. Its source is ../shared/vendor/citus-14.0.1.tar.gz beside the
# checkout when there, else the public v14.0.1 release, checked against the pinned SHA-256, with the fixes in
# citus/patches applied (each says what it fixes). It is installed into
# this major's tree (inside a major's root, which persists: scripts/pg_root.sh), so it is built once per machine.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
bin=$("$PG_CONFIG" --bindir)
CITUS_VERSION=14.0.1
CITUS_SHA256=26ddb8ec9de07c5fa8426e435d10936e5cd6bed01a5ad94aab92e818081e5ec9
CITUS_URL=https://github.com/citusdata/citus/archive/refs/tags/v$CITUS_VERSION.tar.gz
as_postgres() { if [ "$(id -un)" = postgres ]; then "$@"; else sudo -u postgres "$@"; fi; }

installed_version() {
  local control; control="$("$PG_CONFIG" --sharedir)/extension/citus.control"
  [ -f "$control" ] && [ -f "$("$PG_CONFIG" --pkglibdir)/citus.so" ] || return 0
  sed -nE "s/^default_version = '([0-9.]+)-[0-9]+'/\1/p" "$control"
}

ensure() {
  local major; major=$("$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
  case $major in 16|17|18) ;; *) echo "citus: Citus $CITUS_VERSION does not support PostgreSQL $major" >&2; exit 2 ;; esac
  # citus.control names the extension's schema version (14.0-1), not the release; the library names the release.
  # Built by this script: the release, with citus/patches applied (the text the NULL patch adds is in it).
  # (The library's strings are read whole: `grep -q` closing the pipe early would fail it under pipefail.)
  local strings
  [ -z "$(installed_version)" ] || strings=$(strings "$("$PG_CONFIG" --pkglibdir)/citus.so")
  if [[ ${strings:-} == *"Citus $CITUS_VERSION "* && ${strings:-} == *"distribution argument is NULL"* ]]; then
    return 0
  fi
  bash "$here/scripts/apt_install.sh" citus libicu-dev libzstd-dev liblz4-dev libcurl4-openssl-dev libkrb5-dev \
    libselinux1-dev libxslt1-dev libpam0g-dev libreadline-dev zlib1g-dev binutils patch
  local cache=/var/cache/idem_keys/citus tarball
  mkdir -p "$cache"
  tarball="$(dirname "$here")/shared/vendor/citus-$CITUS_VERSION.tar.gz"
  if [ ! -f "$tarball" ]; then
    tarball="$cache/citus-$CITUS_VERSION.tar.gz"
    [ -f "$tarball" ] || python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$CITUS_URL" "$tarball.part"
    [ -f "$tarball" ] || mv "$tarball.part" "$tarball"
  fi
  if ! echo "$CITUS_SHA256  $tarball" | sha256sum -c --quiet; then
    echo "citus: $tarball is not the v$CITUS_VERSION release (SHA-256 differs)" >&2; exit 1
  fi
  echo "citus: building Citus $CITUS_VERSION for PostgreSQL $major (a few minutes, once per machine)"
  local build="$cache/build-pg$major"
  rm -rf "$build"; mkdir -p "$build"
  tar -xzf "$tarball" -C "$build" --strip-components=1
  local fix
  for fix in "$here"/citus/patches/*.patch; do
    patch -s -d "$build" -p1 <"$fix"
  done
  (cd "$build" && ./configure PG_CONFIG="$PG_CONFIG" >configure.log 2>&1 && make -j"$(nproc)" >make.log 2>&1 \
    && make install >install.log 2>&1) || { tail -n 30 "$build"/*.log >&2; exit 1; }
  rm -rf "$build"
}

# node DIR NAME PORT: one Citus node, started.
# CITUS_SETTINGS: more postgresql.conf lines for every node, one per line (bench/citus.sh).
node() {
  local dir=$1 name=$2 port=$3 extra=()
  [ -z "${CITUS_SETTINGS:-}" ] || mapfile -t extra <<<"$CITUS_SETTINGS"
  bash "$here/scripts/cluster.sh" start "$dir/$name" "$port" \
    "shared_preload_libraries = 'citus,idem_keys'" "idem_keys.sweep_databases = 'idem'" \
    "max_prepared_transactions = 100" "wal_level = logical" "max_connections = 200" \
    "citus.shard_count = 8" "log_min_messages = warning" "${extra[@]}"
  sql "$dir/$name" "$port" -d postgres -c "SELECT 1 FROM pg_database WHERE datname = 'idem'" | grep -q 1 \
    || sql "$dir/$name" "$port" -d postgres -c "CREATE DATABASE idem"
  sql "$dir/$name" "$port" -d idem -c "CREATE EXTENSION IF NOT EXISTS citus"
}

sql() { local dir=$1 port=$2; shift 2; as_postgres "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"; }

start() {
  local dir=$1 port=$2 edition=${3:-extension}
  mkdir -p "$dir"; chown postgres: "$dir"
  node "$dir" coordinator "$port"
  node "$dir" worker1 $((port + 1))
  node "$dir" worker2 $((port + 2))
  local c=(sql "$dir/coordinator" "$port" -d idem)
  "${c[@]}" -c "SELECT citus_set_coordinator_host('127.0.0.1', $port)" >/dev/null
  for w in 1 2; do
    "${c[@]}" -c "SELECT citus_add_node('127.0.0.1', $((port + w)))" >/dev/null
  done
  # Roles propagate from the coordinator to the workers: idem_app exists everywhere, granted nothing.
  "${c[@]}" -c "DO \$\$ BEGIN CREATE ROLE idem_app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$"
  if [ "$edition" = portable ]; then
    python3 "$here/scripts/portable.py" "$dir/idem_keys_portable.sql" >/dev/null
    chmod 644 "$dir/idem_keys_portable.sql"
    # The portable edition is plain SQL: each node gets the same file, then the coordinator distributes.
    for n in "coordinator $port" "worker1 $((port + 1))" "worker2 $((port + 2))"; do
      set -- $n
      sql "$dir/$1" "$2" -d idem -c "SET citus.enable_ddl_propagation = off" -f "$dir/idem_keys_portable.sql" >/dev/null
    done
  else
    # CREATE EXTENSION on the coordinator is run on every worker too.
    "${c[@]}" -c "CREATE EXTENSION IF NOT EXISTS idem_keys"
  fi
  # On standard input: psql runs as postgres, which may not enter the checkout (a root user's clone in /root).
  "${c[@]}" <"$here/citus/idem_keys_distribute.sql" >/dev/null
  echo "citus: coordinator 127.0.0.1:$port, workers :$((port + 1)) :$((port + 2)), database idem ($edition)"
}

add() {
  local dir=$1 port=$2 coordinator_port
  coordinator_port=$(sed -nE 's/^port = ([0-9]+)/\1/p' "$dir/coordinator/data/postgresql.conf" | tail -1)
  node "$dir" worker3 "$port"
  sql "$dir/coordinator" "$coordinator_port" -d idem -c "SELECT citus_add_node('127.0.0.1', $port)" >/dev/null
  # The extension came with the node's metadata; the portable edition is installed on it like on the others
  # (after the node joined, so that Citus's shell of idem_keys is the table the file finds there).
  if [ -f "$dir/idem_keys_portable.sql" ]; then
    sql "$dir/worker3" "$port" -d idem -c "SET citus.enable_ddl_propagation = off" -f "$dir/idem_keys_portable.sql" >/dev/null
  fi
  sql "$dir/coordinator" "$coordinator_port" -d idem <"$here/citus/idem_keys_distribute.sql" >/dev/null
}

stop() {
  local dir=$1 n
  for n in "$dir"/coordinator "$dir"/worker*; do
    [ -d "$n" ] && bash "$here/scripts/cluster.sh" stop "$n"
  done
  return 0
}

case "${1:-}" in
  ensure) ensure ;;
  start) start "$2" "$3" "${4:-extension}" ;;
  add) add "$2" "$3" ;;
  stop) stop "$2" ;;
  *) echo "usage: $0 ensure | start DIR PORT [portable] | add DIR PORT | stop DIR" >&2; exit 2 ;;
esac
