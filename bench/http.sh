#!/usr/bin/env bash
# What each middleware costs per request: the sample payments app of tests/http with its middleware against the
# same app without idempotency (IDEM_OFF=1), side by side on one throwaway PostgreSQL with the extension, new keys
# and replays, 1 and 8 clients, interleaved rounds (bench/http/rounds.py), driven by bench/http/load.go; apps go,
# python, node, django (gunicorn) and rails (puma), each on one stack (scripts/stacks.sh): its oldest end, bookworm
# itself, where it has one, else its newest (tests/http/matrix.sh): go@sid (Go 1.27, pgx v5), the others @host. For
# node and django also the peer a team would pick instead (IDEM_PEER), the same app on it:
# - node: npm express-idempotency with its Redis adapter, against its own redis-server (Debian's; loopback, a temp
#   dir, no RDB snapshots, `appendonly yes` with `appendfsync always`, or `everysec` when synchronous_commit is off:
#   the same durability as the commits);
# - django: PyPI django-idempotency-key on Django's database cache, a table in the same PostgreSQL (its
#   settings.py says why).
#   bash bench/http.sh            3 rounds of 5 s per cell and variant (about 18 minutes for the five apps, 8 for
#                                 BENCH_HTTP_LANGS="django rails"); prints the table for docs/benchmarks.md
#   bash bench/http.sh --smoke    one round of 1 s: every app and workload answers 2xx only; not a measurement
# Knobs: BENCH_HTTP_LANGS ("go python node django rails"; APP@STACK for another stack than the one above, e.g.
# "python@trixie"), BENCH_HTTP_CLIENTS ("1 8"), BENCH_HTTP_ROUNDS (3),
# BENCH_HTTP_SECONDS (5), BENCH_HTTP_SYNC (synchronous_commit: on), BENCH_HTTP_PORT (25640; the apps take the next four,
# and Redis, started only when node is measured, the one after: BENCH_HTTP_PORT + 5).
set -euo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
source tests/http/matrix.sh
smoke=
case "${1:-}" in --smoke) smoke=1 ;; "") ;; *) echo "usage: $0 [--smoke]" >&2; exit 2 ;; esac
port=${BENCH_HTTP_PORT:-25640}
langs=${BENCH_HTTP_LANGS:-go python node django rails}
rounds=${BENCH_HTTP_ROUNDS:-$([ -n "$smoke" ] && echo 1 || echo 3)}
seconds=${BENCH_HTTP_SECONDS:-$([ -n "$smoke" ] && echo 1 || echo 5)}
sync=${BENCH_HTTP_SYNC:-on}
case $sync in
  on | off | local | remote_write | remote_apply) ;;
  *) echo "bench/http: BENCH_HTTP_SYNC must be a synchronous_commit value (on, off, local, remote_write, remote_apply), not '$sync'" >&2; exit 2 ;;
esac
# Redis's fsync matching the commits': with no standby, every value but off waits for the local WAL flush.
appendfsync=$([ "$sync" = off ] && echo everysec || echo always)
# Each app with its stack: exactly what is set up is what is served and measured.
apps=() redis=
for app in $langs; do
  lang=${app%%@*}
  [ -n "${newest[$lang]:-}" ] || { echo "bench/http: unknown app '$lang' (one of: $ALL_APPS)" >&2; exit 2; }
  [[ $app == *@* ]] || app=$lang@${oldest[$lang]:-${newest[$lang]}}
  apps+=("$app")
  [ "$lang" != node ] || redis=1 # Redis is node's peer's store only
done

bash tests/http/setup.sh "${apps[@]}"
# The load generator is plain Go (the standard library only), built by the host's Go.
bash scripts/apt_install.sh http-bench golang-go ${redis:+redis-server}
work=$(mktemp -d /tmp/idem-bench-http.XXXXXX)
chmod 755 "$work"
redis_pid=
cleanup() {
  kill_listed "$work/pids" tests/http uvicorn # rounds.py stops its apps; this is for when it could not
  stop_child "$redis_pid"
  bash scripts/cluster.sh stop "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT
GO111MODULE=off go build -o "$work/load" bench/http/load.go

bash scripts/cluster.sh start "$work/pg" "$port"
admin=(psql -h "$work/pg" -p "$port" -U postgres -XqAt -v ON_ERROR_STOP=1)
# The setting is bound as a psql variable (:'sync'), never pasted into the statement.
"${admin[@]}" -d postgres -v sync="$sync" >/dev/null <<'SQL'
ALTER SYSTEM SET synchronous_commit = :'sync';
SELECT pg_reload_conf();
CREATE ROLE shop LOGIN;
CREATE DATABASE bench_http OWNER shop;
SQL
"${admin[@]}" -d bench_http -c "CREATE EXTENSION idem_keys"
redis_args=() redis_line=
if [ -n "$redis" ]; then
  redis_port=$((port + 5))
  mkdir "$work/redis"
  redis-server --port "$redis_port" --bind 127.0.0.1 --protected-mode yes --dir "$work/redis" --daemonize no \
    --appendonly yes --appendfsync "$appendfsync" --save "" --logfile "$work/redis/redis.log" &
  redis_pid=$!
  redis_answers() { [ "$(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null)" = PONG ]; }
  if ! wait_until 10 redis_answers; then
    echo "bench/http: redis-server did not start; its log:" >&2
    cat "$work/redis/redis.log" >&2
    exit 1
  fi
  redis_args=(--redis-url "redis://127.0.0.1:$redis_port")
  redis_line=" $(redis-server --version | cut -d' ' -f1-3) on 127.0.0.1:$redis_port, appendfsync $appendfsync,"
fi
echo "bench/http: PostgreSQL $("${admin[@]}" -d postgres -c "SHOW server_version") on 127.0.0.1:$port," \
  "synchronous_commit = $("${admin[@]}" -d postgres -c "SHOW synchronous_commit"),$redis_line" \
  "commit $(git rev-parse --short HEAD), $(nproc) cores"
python3 -B bench/http/rounds.py --database-url "postgres://shop@127.0.0.1:$port/bench_http" --workdir "$work" \
  --port $((port + 1)) --load "$work/load" --apps "${apps[*]}" --clients "${BENCH_HTTP_CLIENTS:-1 8}" \
  --rounds "$rounds" --seconds "$seconds" "${redis_args[@]}"
