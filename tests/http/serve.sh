#!/usr/bin/env bash
# serve.sh go|python|node|rails|rack|django PORT: runs that middleware's sample payments app in the foreground on
# 127.0.0.1:PORT (exec, so the caller's pid is the app's: the suite SIGKILLs it). DATABASE_URL names a database
# with idem_keys; IDEM_LEASE, IDEM_WAIT and IDEM_OFF are read by the app (tests/http/README.md). Build first:
# tests/http/setup.sh.
set -euo pipefail
lang=${1:?usage: serve.sh go|python|node|rails|rack|django PORT} port=${2:?usage: serve.sh go|python|node|rails|rack|django PORT}
case $lang in go | python | node | rails | rack | django) ;; *) echo "serve.sh: unknown app $lang" >&2; exit 2 ;; esac
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
exec bash "$(dirname "$0")/apps/$lang/serve.sh" "$port"
