#!/usr/bin/env bash
# The HTTP suite (tests/http/README.md): each middleware package's own tests (on both editions), then every rule of
# docs/integrations.md against the sample app built on each middleware, on a database with the extension and on
# one with the portable edition. Needs tests/http/setup.sh first and the extension installed.
# Usage: run.sh [go] [python] [node] [django] [rails] (default: all five). Ports: HTTP_PG_PORT (default
# 25532) and HTTP_APP_PORT (default 25580; the suite on the extension takes it and the next, the one on the
# portable edition the two after), below Linux's ephemeral range so no client connection holds a port an app
# restarts on.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
pg_port=${HTTP_PG_PORT:-25532}
app_port=${HTTP_APP_PORT:-25580}
langs=("$@")
((${#langs[@]})) || langs=(go python node django rails)
start=$SECONDS

work=$(mktemp -d /tmp/idem-http.XXXXXX)
chmod 755 "$work" # the server runs as postgres and needs to reach its directory inside
cleanup() {
  # suite.py stops what it starts; this is for when it could not (killed, timed out).
  kill_listed "$work/pids" tests/http uvicorn
  bash scripts/cluster.sh stop "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT

bash scripts/cluster.sh start "$work/pg" "$pg_port"
admin=(psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1)
# The apps connect as shop, an ordinary role that owns its databases (so it may create the payments table).
edition_databases "$work/pg" "$pg_port" http
ext_url="postgres://shop@127.0.0.1:$pg_port/http_ext"
portable_url="postgres://shop@127.0.0.1:$pg_port/http_portable"
echo "http: PostgreSQL on 127.0.0.1:$pg_port, idem_keys $("${admin[@]}" -d http_ext -c \
  "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'") in http_ext, the portable edition" \
  "$("${admin[@]}" -d http_portable -c "SELECT idem_keys_portable_version()") in http_portable"

declare -A package=([go]=idemhttp [python]=idem-keys-asgi [node]=idem-keys-express [rails]=idem_keys-rack [django]=idem-keys-django)
for lang in "${langs[@]}"; do
  echo "--- ${package[$lang]}: the package's own tests"
  t=$SECONDS
  for url in "$ext_url" "$portable_url"; do
    DATABASE_URL=$url timeout --kill-after=10 300 bash "packages/${package[$lang]}/test.sh"
  done
  echo "--- ${package[$lang]}: ok in $((SECONDS - t)) s"
done

# The two editions side by side, each with its apps on its own two ports: most of a check's time is waiting (for a
# lease, a wait bound, an app's restart), so two at once take little more than one. A hard stop well inside CI's
# budget, whatever hangs; each suite's output is shown whole once both are done.
suite() { # suite DATABASE_URL PORT LABEL LOG
  timeout --kill-after=10 1200 python3 -B tests/http/suite.py --database-url "$1" --workdir "$work" \
    --port "$2" --label "$3" "${langs[@]}" >"$4" 2>&1
}
suite "$ext_url" "$app_port" "on the extension" "$work/suite-ext.log" &
ext_pid=$!
suite "$portable_url" "$((app_port + 2))" "on the portable edition" "$work/suite-portable.log" &
portable_pid=$!
ext_rc=0 portable_rc=0
wait "$ext_pid" || ext_rc=$?
wait "$portable_pid" || portable_rc=$?
cat "$work/suite-ext.log" "$work/suite-portable.log"
((ext_rc == 0 && portable_rc == 0)) || { echo "http: the suite failed (extension rc=$ext_rc, portable rc=$portable_rc)"; exit 1; }
echo "http: total $((SECONDS - start)) s"
