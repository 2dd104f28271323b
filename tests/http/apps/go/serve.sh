#!/usr/bin/env bash
# serve.sh PORT: the Go sample app in the foreground on 127.0.0.1:PORT (exec: the caller's pid is the app's).
# DATABASE_URL, IDEM_LEASE, IDEM_WAIT and IDEM_OFF come from the environment. Build first: setup.sh.
set -euo pipefail
port=${1:?usage: serve.sh PORT}
LISTEN_ADDR=127.0.0.1:$port exec "$(dirname "$0")/bin/app"
