#!/usr/bin/env bash
# The upgrade test: every released version -> the current one, keys kept, catalog equal to a fresh install.
# Needs the current build installed (`cargo pgrx install`); installs the frozen release scripts itself.
set -euo pipefail
cd "$(dirname "$0")"
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
current=$(sed -nE 's/^version = "(.*)"/\1/p' ../../Cargo.toml | head -1)
extdir=$("$PG_CONFIG" --sharedir)/extension
dir=$(mktemp -d /tmp/idem-upgrade.XXXXXX) port=25351
trap 'bash ../../scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT

# Released install scripts: idem_keys--A.sql (one "--"); the upgrade scripts come with `cargo pgrx install`.
released=$(cd ../../sql && ls idem_keys--*.sql | grep -v -- '--.*--')
for script in $released; do install -m 644 "../../sql/$script" "$extdir/"; done
bash ../../scripts/cluster.sh start "$dir" "$port"
psql_in() { local db=$1; shift; psql -X -q -c "SET client_min_messages = warning" -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d "$db" "$@"; }

for script in $released; do
  from=${script#idem_keys--}; from=${from%.sql}
  echo "upgrade: $from -> $current"
  psql_in postgres -c 'DROP DATABASE IF EXISTS upgraded' -c 'DROP DATABASE IF EXISTS fresh' \
                   -c 'CREATE DATABASE upgraded' -c 'CREATE DATABASE fresh'
  psql_in upgraded -c "CREATE EXTENSION idem_keys VERSION '$from'" -f before.sql 2>&1 | tee "$dir/before.txt"
  # Only 0.1.0's table differs from the one the library writes to.
  expected=00000; [ "$from" = 0.1.0 ] && expected=55000
  grep -qx "sqlstate $expected" "$dir/before.txt" ||
    { echo "upgrade: idem_claim on the $from catalog did not end in SQLSTATE $expected" >&2; exit 1; }
  psql_in upgraded -c 'ALTER EXTENSION idem_keys UPDATE' -f after.sql
  psql_in fresh -c 'CREATE EXTENSION idem_keys'
  psql_in upgraded -At -f catalog.sql > "$dir/upgraded.txt"
  psql_in fresh -At -f catalog.sql > "$dir/fresh.txt"
  if ! diff -u "$dir/fresh.txt" "$dir/upgraded.txt"; then
    echo "upgrade: $from -> $current leaves a catalog that differs from a fresh install (diff above)" >&2
    exit 1
  fi
  echo "upgrade: $from -> $current: catalog equal to a fresh install ($(wc -l < "$dir/fresh.txt") properties compared)"
done
