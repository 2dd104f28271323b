#!/usr/bin/env bash
# Powertools' idempotency on idem_keys against Powertools' own Redis layer: the same @idempotent handler, the
# same machine, interleaved rounds, at matching durability (bench.py says what each cell runs).
#   bash bench/powertools/run.sh           full run (about 8 min): 5 rounds of 3 s per cell, prints the table
#   bash bench/powertools/run.sh --smoke   both layers give the same results step by step, then one short
#                                          round: checks that everything runs, not a measurement
# It starts a throwaway PostgreSQL with the extension (scripts/cluster.sh) and its own redis-server (Debian's,
# installed if missing; loopback, a temp dir, `appendonly yes`, no RDB snapshots), and stops both on exit.
# Knobs (environment): PT_BENCH_PG_PORT (29101), PT_BENCH_REDIS_PORT (29110), PT_BENCH_ROUNDS, PT_BENCH_SECONDS,
# PT_BENCH_WARMUP, PT_BENCH_THREADS (comma-separated, "1,8").
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=powertools-bench
source tests/lib.sh # wait_until, stop_child
mode=full
case "${1:-}" in --smoke) mode=smoke ;; "") ;; *) echo "usage: $0 [--smoke]" >&2; exit 2 ;; esac
full_or_smoke() { if [ $mode = smoke ]; then echo "$2"; else echo "$1"; fi; }
PG_PORT=${PT_BENCH_PG_PORT:-29101}
REDIS_PORT=${PT_BENCH_REDIS_PORT:-29110}
ROUNDS=${PT_BENCH_ROUNDS:-$(full_or_smoke 5 1)}
SECONDS_PER_CELL=${PT_BENCH_SECONDS:-$(full_or_smoke 3 0.5)}
WARMUP=${PT_BENCH_WARMUP:-$(full_or_smoke 1 0.2)}
THREADS=${PT_BENCH_THREADS:-1,8}

bash scripts/apt_install.sh powertools-bench redis-server
(cd bench/powertools && bash ../../scripts/python_venv.sh powertools-bench .venv requirements.txt)

pg_dir=$(mktemp -d /tmp/pt-bench-pg.XXXXXX) # short: it holds the server's Unix socket
redis_dir=$(mktemp -d /tmp/pt-bench-redis.XXXXXX)
redis_pid=
cleanup() {
  stop_child "$redis_pid"
  bash scripts/cluster.sh stop "$pg_dir"
  rm -rf "$pg_dir" "$redis_dir"
}
trap cleanup EXIT

bash scripts/cluster.sh start "$pg_dir" "$PG_PORT" "log_min_messages = warning"
psql -X -q -v ON_ERROR_STOP=1 -h "$pg_dir" -p "$PG_PORT" -U postgres -d postgres -c 'CREATE EXTENSION idem_keys'

# The AOF in the temp dir; appendfsync is switched per durability by bench.py (CONFIG SET).
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode yes --dir "$redis_dir" --daemonize no \
  --appendonly yes --appendfsync everysec --save "" --logfile "$redis_dir/redis.log" &
redis_pid=$!
redis_answers() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }
wait_until 10 redis_answers || { echo "redis-server did not start" >&2; exit 1; }

echo "idem_keys: PostgreSQL $(psql -X -At -h "$pg_dir" -p "$PG_PORT" -U postgres -d postgres -c 'SHOW server_version'),"\
  "idem_keys $(psql -X -At -h "$pg_dir" -p "$PG_PORT" -U postgres -d postgres -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'");"\
  "$(redis-server --version | cut -d' ' -f1-3); $(nproc) cores"
args=(--pg-url "postgresql://postgres@127.0.0.1:$PG_PORT/postgres" --redis-port "$REDIS_PORT" --rounds "$ROUNDS"
      --seconds "$SECONDS_PER_CELL" --warmup "$WARMUP" --threads "$THREADS")
[ $mode = smoke ] && args+=(--smoke)
PYTHONDONTWRITEBYTECODE=1 bench/powertools/.venv/bin/python bench/powertools/bench.py "${args[@]}"
knobs=$(env | grep -E '^PT_BENCH_' | sort | tr '\n' ' ' || true)
echo "Command: ${knobs}bash bench/powertools/run.sh${1:+ $1}"
