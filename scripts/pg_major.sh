# Sourced by the scripts that need to know which PostgreSQL they build or test for. PG_CONFIG is the one
# knob that picks the major (Makefile, setup, test, package); everything else is derived from it here.
#   PG_CONFIG  default: Debian's PostgreSQL 15 on the bookworm host
#   pg_major   the major of $PG_CONFIG: asked of pg_config itself, or read off a Debian path
#              (/usr/lib/postgresql/N/bin/pg_config) before the server-dev package that holds it is installed
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
export PG_CONFIG
pg_major() {
  if [ -x "$PG_CONFIG" ]; then
    "$PG_CONFIG" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/'
  else
    sed -nE 's|^/usr/lib/postgresql/([0-9]+)/bin/pg_config$|\1|p' <<<"$PG_CONFIG" | grep . \
      || { echo "PG_CONFIG=$PG_CONFIG: not found, and not a Debian path to install" >&2; return 1; }
  fi
}
# The majors `make test` covers, in order; PG_MAJORS narrows a run (PG_MAJORS=17 make test).
SUPPORTED_MAJORS="15 17 18"
