#!/usr/bin/env bash
# serve.sh APP[@STACK] PORT: runs that middleware's sample payments app in the foreground on 127.0.0.1:PORT (exec
# all the way, so the caller's pid is the app's: the suite SIGKILLs it). APP: go, python, node, rails, rack or
# django; STACK: host (the default: bookworm, the oldest end), trixie or sid (the Debian roots, the newest end:
# scripts/stacks.sh). DATABASE_URL names a database with idem_keys; IDEM_LEASE, IDEM_WAIT and IDEM_OFF are read by
# the app (tests/http/README.md). Build first: tests/http/setup.sh APP[@STACK].
set -euo pipefail
usage="usage: serve.sh go|python|node|rails|rack|django[@host|@trixie|@sid] PORT"
app=${1:?$usage} port=${2:?$usage}
lang=${app%%@*} stack=host
[[ $app != *@* ]] || stack=${app#*@}
case $lang in go | python | node | rails | rack | django) ;; *) echo "serve.sh: unknown app $lang" >&2; exit 2 ;; esac
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
here=$(cd "$(dirname "$0")/../.." && pwd)
exec bash "$here/scripts/stacks.sh" run "$stack" bash "tests/http/apps/$lang/serve.sh" "$port"
