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
SUPPORTED_MAJORS="15 16 17 18"
# Where each major comes from on a bookworm host: 15 is the host's own; 16 is the relocatable build from
# PyPI's pgserver wheel, run on the host (scripts/pg16.sh); 17 and 18 live in Debian roots (scripts/pg_root.sh).
WHEEL_MAJORS="16"
# where_major MAJOR: host (PG_CONFIG's own), wheel, native (a Debian pg_config on this host) or root.
where_major() {
  if [ "$1" = "$(pg_major)" ]; then echo host
  elif [[ " $WHEEL_MAJORS " == *" $1 "* ]]; then echo wheel
  elif [ -x "/usr/lib/postgresql/$1/bin/pg_config" ]; then echo native
  else echo root
  fi
}
# in_major MAJOR CMD...: CMD in the checkout with PG_CONFIG for MAJOR, wherever that major lives here. Each
# major but the host's builds into target/pgMAJOR, so switching majors rebuilds nothing.
in_major() {
  local major=$1; shift
  case $(where_major "$major") in
    host) "$@" ;;
    wheel) bash scripts/pg16.sh ensure
           env PG_CONFIG="$(bash scripts/pg16.sh pg_config)" CARGO_TARGET_DIR="$PWD/target/pg$major" "$@" ;;
    native) env PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" CARGO_TARGET_DIR="$PWD/target/pg$major" "$@" ;;
    root) bash scripts/pg_root.sh run "$major" "$@" ;;
  esac
}
# Majors with no pg_cron here (the wheel's build has no contrib and no pg_cron): the worker stage tests the
# background sweeper on them and says that pg_cron is covered on the other majors.
NO_PG_CRON_MAJORS="16"
