#!/usr/bin/env bash
# The stacks the packages are tested on, both ends of each package's supported range:
#   host    bookworm itself: Go 1.19, Python 3.11, Node 18, Ruby 3.1 with Rack 2.2 and Rails 6.1 (the oldest end)
#   trixie  the Debian root of PostgreSQL 17: Python 3.13, Node 20.19, Ruby 3.3 with Rack 3.1 and Rails 7.2
#   sid     the Debian root of PostgreSQL 18: Go with pgx v5, Python 3.14, Rack 3.2
# Which package runs where is each app's and package's own choice (tests/http/README.md states the matrix).
#   stacks.sh run STACK CMD [ARG...]   CMD in the checkout on STACK, with IDEM_STACK=STACK; exec all the way, so
#                                      the caller's pid is CMD's (a test SIGKILLs the app it started)
#   stacks.sh major STACK              the PostgreSQL major whose root holds STACK (host: none)
# Inside a root, what a stack needs beyond the server (a language, its libraries) is installed by the script
# that needs it, with scripts/apt_install.sh, as on the host. Only IDEM_*, POWERTOOLS_*, DATABASE_URL*, REDIS_URL and the
# benchmark's knobs cross into a root (scripts/pg_root.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

major_of() {
  case $1 in
    trixie) echo 17 ;;
    sid) echo 18 ;;
    host) echo "" ;;
    *) echo "stacks.sh: unknown stack '$1' (host, trixie or sid)" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  major) major_of "${2:?usage: stacks.sh major STACK}" ;;
  run)
    stack=${2:?usage: stacks.sh run STACK CMD...}; shift 2
    major=$(major_of "$stack")
    export IDEM_STACK=$stack
    if [ -z "$major" ]; then
      cd "$here" && exec "$@"
    fi
    exec bash "$here/scripts/pg_root.sh" run "$major" "$@"
    ;;
  *) echo "usage: stacks.sh run STACK CMD... | major STACK" >&2; exit 2 ;;
esac
