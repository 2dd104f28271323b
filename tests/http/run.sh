#!/usr/bin/env bash
# The HTTP suite (tests/http/README.md): each middleware package's own tests on both ends of its supported range
# (on both editions), then every rule of docs/integrations.md against the sample app built on each middleware, then
# PostgreSQL restarted under every app. Needs the extension installed; installs the rest (tests/http/setup.sh).
#
# The matrix (README: "Both ends of every range"): every app on the newest stack it supports, in both modes, on the
# extension and on the portable edition; the oldest end of each range (bookworm itself) in the transactional mode
# on the extension (the mode that reaches deepest into each framework: its transactions, savepoints, commit hooks).
#
# Usage: run.sh [APP...] (go, python, node, django, rails, rack; default all six), each at both of its ends.
# Ports: HTTP_PG_PORT (default 25532) and HTTP_APP_PORT (default 25580; each suite takes two ports from it on, the
# restart's apps two per app after those), below Linux's ephemeral range so no client connection holds a port an
# app restarts on.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
pg_port=${HTTP_PG_PORT:-25532}
app_port=${HTTP_APP_PORT:-25580}
langs=("$@")
start=$SECONDS

source tests/http/matrix.sh
((${#langs[@]})) || read -ra langs <<<"$ALL_APPS"

new_apps=() old_apps=() packages=()
for lang in "${langs[@]}"; do
  [ -n "${newest[$lang]:-}" ] || { echo "run.sh: unknown app $lang (one of: $ALL_APPS)" >&2; exit 2; }
  new_apps+=("$lang@${newest[$lang]}")
  [ -z "${oldest[$lang]}" ] || old_apps+=("$lang@${oldest[$lang]}")
  [[ " ${packages[*]} " == *" ${package[$lang]} "* ]] || packages+=("${package[$lang]}")
  if [[ $lang == python || $lang == django ]] && [[ " ${packages[*]} " != *" idem-keys-core "* ]]; then
    packages+=(idem-keys-core) # the Python packages' shared core
  fi
done
bash tests/http/setup.sh "${new_apps[@]}" "${old_apps[@]}"

work=$(mktemp -d /tmp/idem-http.XXXXXX)
chmod 755 "$work" # the server runs as postgres and needs to reach its directory inside
cleanup() {
  # suite.py stops what it starts; this is for when it could not (killed, timed out).
  kill_listed "$work/pids" tests/http uvicorn
  bash scripts/cluster.sh stop "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT

# Eight suites at once, each app with a pool of up to 18 connections, the packages' own tests beside each other,
# then twelve apps on the restart: more than the default 100.
bash scripts/cluster.sh start "$work/pg" "$pg_port" "max_connections = 500"
admin=(psql -h "$work/pg" -p "$pg_port" -U postgres -XqAt -v ON_ERROR_STOP=1)
# The apps connect as shop, an ordinary role that owns its databases (so it may create the payments table).
edition_databases "$work/pg" "$pg_port" http
ext_url="postgres://shop@127.0.0.1:$pg_port/http_ext"
portable_url="postgres://shop@127.0.0.1:$pg_port/http_portable"
echo "http: PostgreSQL on 127.0.0.1:$pg_port, idem_keys $("${admin[@]}" -d http_ext -c \
  "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'") in http_ext, the portable edition" \
  "$("${admin[@]}" -d http_portable -c "SELECT idem_keys_portable_version()") in http_portable"

# The packages' own tests, three packages at a time, each on databases of its own (so their tables never meet);
# one package's stacks one after the other (a package's tests may end its own pool's sessions by name).
package_tests() { # package_tests PACKAGE LOG
  local pkg=$1 log=$2 db stack url t=$SECONDS
  db=pkg_$(tr -c 'a-z0-9\n' _ <<<"$pkg")
  edition_databases "$work/pg" "$pg_port" "$db" >"$log" 2>&1
  for stack in ${package_stacks[$pkg]}; do
    for url in "postgres://shop@127.0.0.1:$pg_port/${db}_ext" "postgres://shop@127.0.0.1:$pg_port/${db}_portable"; do
      echo "--- $pkg on $stack, $(basename "$url")" >>"$log"
      DATABASE_URL=$url timeout --kill-after=10 600 bash scripts/stacks.sh run "$stack" bash "packages/$pkg/test.sh" \
        >>"$log" 2>&1 || { echo "--- $pkg on $stack, $(basename "$url"): FAILED" >>"$log"; return 1; }
    done
  done
  echo "--- $pkg: ok in $((SECONDS - t)) s (${package_stacks[$pkg]// /, })" >>"$log"
}
pids=() logs=() failed=0
for pkg in "${packages[@]}"; do
  while (($(jobs -rp | wc -l) >= 3)); do sleep 1; done # (not wait -n: the statuses are read below, by pid)
  logs+=("$work/package-$pkg.log")
  package_tests "$pkg" "${logs[-1]}" &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[i]}" || failed=$((failed + 1)); done
cat "${logs[@]}"
((failed == 0)) || { echo "http: the own tests of $failed of ${#pids[@]} packages failed"; exit 1; }

# The suites side by side, each on its own two ports (an app, the proxy in front of the database). Most of a
# check's time is waiting (for a lease, a wait bound, an app's restart), so eight at once take little more than
# one (each app's checks take about 80 s per mode). A hard stop well inside CI's budget, whatever hangs; each
# suite's output is shown whole once all are done.
suite() { # suite DATABASE_URL PORT LABEL LOG SUITE_ARGS...
  local url=$1 port=$2 label=$3 log=$4; shift 4
  timeout --kill-after=10 1200 python3 -B tests/http/suite.py --database-url "$url" --workdir "$work" \
    --port "$port" --label "$label" "$@" >"$log" 2>&1
}
runs=() # "DATABASE_URL|label|suite args"
for edition in ext portable; do
  url=$ext_url label="on the extension"
  [ "$edition" = portable ] && url=$portable_url label="on the portable edition"
  for group in "go python" "node rack" "django rails"; do
    picked=()
    for a in "${new_apps[@]}"; do [[ " $group " != *" ${a%%@*} "* ]] || picked+=("$a"); done
    ((${#picked[@]})) && runs+=("$url|$label, newest (${picked[*]})|${picked[*]}")
  done
done
for group in "python node" "django rails rack"; do
  picked=()
  for a in "${old_apps[@]}"; do [[ " $group " != *" ${a%%@*} "* ]] || picked+=("$a"); done
  ((${#picked[@]})) && runs+=("$ext_url|on the extension, oldest (${picked[*]})|--modes transactional ${picked[*]}")
done
pids=() logs=() port=$app_port
for run in "${runs[@]}"; do
  IFS='|' read -r url label args <<<"$run"
  logs+=("$work/suite-${#logs[@]}.log")
  # shellcheck disable=SC2086
  suite "$url" "$port" "$label" "${logs[-1]}" $args &
  pids+=($!)
  port=$((port + 2))
done
failed=0
for i in "${!pids[@]}"; do wait "${pids[i]}" || failed=$((failed + 1)); done
cat "${logs[@]}"
((failed == 0)) || { echo "http: $failed of ${#pids[@]} suites failed"; exit 1; }

# Then PostgreSQL restarts under every app at once (the newest ends), in both modes: each must answer new keys
# again by itself (restart.py). Alone on the server now, since it stops it.
timeout --kill-after=10 300 python3 -B tests/http/restart.py --database-url "$ext_url" --cluster "$work/pg" \
  --workdir "$work" --port "$port" "${new_apps[@]}"
echo "http: total $((SECONDS - start)) s"
