#!/usr/bin/env bash
# Why claims slow down during a sweep: the background worker sweeps N expired keys while 4 clients claim new
# keys at 200/s with synchronous_commit = on (as in the bench's sweep section), and pg_stat_activity is
# sampled for what the active claims wait on. Prints claim p50/p99 alone and during the sweep, and the
# wait events counted.
#   bash bench/sweep_waits.sh                     1 000 000 keys
#   SWEEP_KEYS=200000 bash bench/sweep_waits.sh "wal_compression = on"   extra server settings as arguments
# Needs the extension installed (make install).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${SWEEP_KEYS:-1000000}
source bench/common.sh

start_server sw "${SWEEP_PORT:-25443}" "shared_preload_libraries = 'idem_keys'" \
  "idem_keys.sweep_enabled = off" "idem_keys.sweep_interval = 60" "$@"
[ $# -eq 0 ] || echo "=== extra settings: $*"
{ echo '\set key random(1, 9000000000000000000)'; cat bench/scripts/idem/claim.pgbench; } >"$dir/claim.pgbench"
claims() { # SECONDS LOG_PREFIX
  PGOPTIONS="-c synchronous_commit=on" "$PGBENCH" -n -M prepared -h "$dir" -p "$PORT" -U postgres -c 4 -j 2 \
    -R 200 -T "$1" -l --log-prefix="$2" -f "$dir/claim.pgbench" -D scope=new -D req="$BODY" postgres >/dev/null
}
latency() { python3 bench/report.py stats "$@" | awk '{printf "%d claims, p50 %.2f ms, p99 %.2f ms", $1, $2, $3}'; }

fill_expired "$N"
sql -c "VACUUM ANALYZE idem_keys" -c CHECKPOINT
claims 10 "$dir/alone"
echo "=== claims alone: $(latency "$dir/alone")"

before=$(sql -c "SELECT coalesce(removed_since_start, 0) FROM idem_sweep_status()")
( i=0; until [ -e "$dir/done" ]; do i=$((i + 1)); claims 2 "$dir/during.$i"; done ) &
claimers=$!
sleep 1.5
# One connection samples every 10 ms (\watch: a transaction each, so it holds back no cleanup); a new
# connection per sample would cost enough CPU on 2 cores to slow the claims it samples.
echo "SELECT coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '-') FROM pg_stat_activity
       WHERE application_name = 'pgbench' AND state = 'active' \\watch 0.01" |
  psql -X -q -At -h "$dir" -p "$PORT" -U postgres >"$dir/waits" &
sampler=$!
t0=$(date +%s.%N)
sql -c "ALTER SYSTEM SET idem_keys.sweep_enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
sql -c "CALL bench.await_sweep($((before + N)), '10 minutes')" >/dev/null
t1=$(sql -c "SELECT extract(epoch FROM last_sweep_at) FROM idem_sweep_status()")
sleep 0.5
touch "$dir/done"
kill $sampler; wait $claimers
echo "=== the worker swept $N keys in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s; claims meanwhile: $(latency "$dir/during" --window "$t0" "$t1")"
echo "=== what active claims waited on during the sweep ($(grep -c . "$dir/waits") samples of active claims):"
grep . "$dir/waits" | sort | uniq -c | sort -rn | head -8
