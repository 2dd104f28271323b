#!/usr/bin/env bash
# serve.sh PORT: the Node sample app in the foreground on 127.0.0.1:PORT (exec: the caller's pid is node's, and
# its command line names tests/http, which run.sh's clean-up looks for).
set -euo pipefail
exec node "$(dirname "$0")/server.js" "${1:?usage: serve.sh PORT}"
