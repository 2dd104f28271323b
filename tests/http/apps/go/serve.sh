#!/usr/bin/env bash
# serve.sh PORT: the Go sample app in the foreground on 127.0.0.1:PORT (exec: the caller's pid is the app's), the build
# of the stack in $IDEM_STACK. DATABASE_URL, IDEM_LEASE, IDEM_WAIT, IDEM_OFF and IDEM_TX come from the environment.
# Build first: setup.sh.
set -euo pipefail
port=${1:?usage: serve.sh PORT}
stack=${IDEM_STACK:-host}
if [ "$stack" != sid ]; then
  echo "tests/http/apps/go: idemhttp needs pgx v5, which Debian ships in sid only, not on $stack: use go@sid" >&2
  exit 2
fi
app=$(dirname "$0")/bin/$stack/app
[ -x "$app" ] || { echo "tests/http/apps/go: no build for $stack ($app): run tests/http/setup.sh go@$stack" >&2; exit 2; }
LISTEN_ADDR=127.0.0.1:$port exec "$app"
