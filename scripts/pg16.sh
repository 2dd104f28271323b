#!/usr/bin/env bash
# PostgreSQL 16 for this machine. No Debian suite reachable here ships it, but PyPI's pgserver 0.1.4 wheel
# holds a complete, relocatable PostgreSQL 16.2 build (server, client tools, the server headers and pgxs with
# pg_regress and pg_isolation_regress; no contrib, no pg_cron). This unpacks it once, outside the checkout, and
# the stages then run on the host with PG_CONFIG pointing into it.
#   pg16.sh ensure        fetch and unpack the wheel (if missing); print nothing else
#   pg16.sh pg_config     print the path of its pg_config
#   pg16.sh copy DIR      a clean copy of the unpacked tree in DIR (for the package test), owned by root
# The tree lives in $IDEM_ROOTS/pg16 (default /var/cache/idem_keys/roots/pg16), so a fresh clone and
# `git clean` keep it, like the Debian roots of 17 and 18 (scripts/pg_root.sh).
set -euo pipefail
roots=${IDEM_ROOTS:-/var/cache/idem_keys/roots}
dir=$roots/pg16
wheel_version=0.1.4
# The wheel's layout: the build under pgserver/pginstall, the libraries its tools link (libpq…) beside it in
# pgserver.libs, found through an RPATH relative to each binary. Both are kept, in place.
tree=$dir/pgserver/pginstall

ensure() {
  [ -f "$dir/.unpacked-$wheel_version" ] && return 0
  echo "pg16: fetching PostgreSQL 16 (PyPI's pgserver $wheel_version wheel, 11 MB, once per machine)"
  rm -rf "$dir" && mkdir -p "$dir/download"
  # cp311 manylinux2014 is the wheel that carries the build; naming it lets any host Python fetch it.
  pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux2014_x86_64 --dest "$dir/download" "pgserver==$wheel_version" >/dev/null
  python3 - "$dir" "$dir"/download/pgserver-*.whl <<'PY'
import os, sys, zipfile
dest, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for entry in z.infolist():
        if not entry.filename.startswith(("pgserver/pginstall/", "pgserver.libs/")):
            continue
        path = z.extract(entry, dest)
        mode = (entry.external_attr >> 16) & 0o777  # zipfile drops the executable bits; the wheel keeps them
        if not entry.is_dir():
            os.chmod(path, mode or 0o644)
PY
  rm -rf "$dir/download"
  # The servers run as postgres: every directory must be searchable and every file readable by it.
  chmod -R a+rX "$dir"
  "$tree/bin/pg_config" --version | grep -q '^PostgreSQL 16\.' || { echo "pg16: the unpacked tree is not PostgreSQL 16" >&2; exit 1; }
  touch "$dir/.unpacked-$wheel_version"
}

case "${1:-}" in
  ensure) ensure ;;
  pg_config) echo "$tree/bin/pg_config" ;;
  copy)
    ensure
    mkdir -p "$2"
    cp -a "$dir/pgserver" "$dir/pgserver.libs" "$2/"
    # A copy without this checkout's build in it: the package test installs into it as a user would.
    rm -f "$2/pgserver/pginstall/lib/postgresql/idem_keys.so" "$2"/pgserver/pginstall/share/postgresql/extension/idem_keys*
    echo "$2/pgserver/pginstall/bin/pg_config"
    ;;
  *) echo "usage: $0 ensure | pg_config | copy DIR" >&2; exit 2 ;;
esac
