#!/usr/bin/env bash
# The HTTP suite (tests/http/README.md): each middleware package's own tests (on both editions), then every rule of
# docs/integrations.md against the sample app built on each middleware, on a database with the extension and on
# one with the portable edition, then PostgreSQL restarted under every app. Needs tests/http/setup.sh first and
# the extension installed.
# Usage: run.sh [go] [python] [node] [django] [rails] [rack] (default: all six apps of the five packages). Ports: HTTP_PG_PORT (default
# 25532) and HTTP_APP_PORT (default 25580; each of the six suites takes two ports from it on, the restart's apps
# two per language after those), below Linux's ephemeral range so no client connection holds a port an app
# restarts on.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
pg_port=${HTTP_PG_PORT:-25532}
app_port=${HTTP_APP_PORT:-25580}
langs=("$@")
((${#langs[@]})) || langs=(go python node django rails rack)
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

# Six suites at once, each app with a pool of up to 18 connections, then twelve apps on the restart: more than
# the default 100.
bash scripts/cluster.sh start "$work/pg" "$pg_port" "max_connections = 400"
admin=(psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1)
# The apps connect as shop, an ordinary role that owns its databases (so it may create the payments table).
edition_databases "$work/pg" "$pg_port" http
ext_url="postgres://shop@127.0.0.1:$pg_port/http_ext"
portable_url="postgres://shop@127.0.0.1:$pg_port/http_portable"
echo "http: PostgreSQL on 127.0.0.1:$pg_port, idem_keys $("${admin[@]}" -d http_ext -c \
  "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'") in http_ext, the portable edition" \
  "$("${admin[@]}" -d http_portable -c "SELECT idem_keys_portable_version()") in http_portable"

declare -A package=([go]=idemhttp [python]=idem-keys-asgi [node]=idem-keys-express [rails]=idem_keys-rack
                    [rack]=idem_keys-rack [django]=idem-keys-django)
declare -A tested=()
for lang in "${langs[@]}"; do
  [ -z "${tested[${package[$lang]}]:-}" ] || continue # Rails and plain Rack: one package
  tested[${package[$lang]}]=yes
  echo "--- ${package[$lang]}: the package's own tests"
  t=$SECONDS
  for url in "$ext_url" "$portable_url"; do
    DATABASE_URL=$url timeout --kill-after=10 300 bash "packages/${package[$lang]}/test.sh"
  done
  echo "--- ${package[$lang]}: ok in $((SECONDS - t)) s"
done

# The suites side by side: each edition, and on each the apps in three groups of two, every suite with its apps on
# its own two ports (an app, the proxy in front of the database). Most of a check's time is waiting (for a lease, a
# wait bound, an app's restart), so six at once take little more than one (each app's checks take about 80 s). A hard stop well inside CI's budget,
# whatever hangs; each suite's output is shown whole once all are done.
suite() { # suite DATABASE_URL PORT LABEL LOG LANG...
  local url=$1 port=$2 label=$3 log=$4; shift 4
  timeout --kill-after=10 1200 python3 -B tests/http/suite.py --database-url "$url" --workdir "$work" \
    --port "$port" --label "$label" "$@" >"$log" 2>&1
}
groups=()
for group in "go python" "node rack" "django rails"; do
  picked=()
  for lang in $group; do [[ " ${langs[*]} " != *" $lang "* ]] || picked+=("$lang"); done
  ((${#picked[@]})) && groups+=("${picked[*]}")
done
pids=() logs=() port=$app_port
for edition in ext portable; do
  url=$ext_url label="on the extension"
  [ "$edition" = portable ] && url=$portable_url label="on the portable edition"
  for group in "${groups[@]}"; do
    logs+=("$work/suite-$edition-${group// /-}.log")
    # shellcheck disable=SC2086
    suite "$url" "$port" "$label ($group)" "${logs[-1]}" $group &
    pids+=($!)
    port=$((port + 2))
  done
done
failed=0
for i in "${!pids[@]}"; do wait "${pids[i]}" || failed=$((failed + 1)); done
cat "${logs[@]}"
((failed == 0)) || { echo "http: $failed of ${#pids[@]} suites failed"; exit 1; }

# Then PostgreSQL restarts under every app at once, in both modes: each must answer new keys again by itself
# (restart.py). Alone on the server now, since it stops it.
timeout --kill-after=10 300 python3 -B tests/http/restart.py --database-url "$ext_url" --cluster "$work/pg" \
  --workdir "$work" --port "$port" "${langs[@]}"
echo "http: total $((SECONDS - start)) s"
