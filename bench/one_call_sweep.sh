#!/usr/bin/env bash
# One idem_sweep() call (what a pg_cron job runs) on a fresh server, timed: 200 000 and 1 000 000 expired keys,
# once with distinct expiries (as idem_finish writes them) and once all sharing one expiry (the worst case:
# within one transaction the batch cursor cannot step past a tie).
#   bash bench/one_call_sweep.sh          needs the extension installed (make install)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
dir=$(mktemp -d /tmp/idem-oc.XXXXXX); PORT=${ONE_CALL_PORT:-25445}
trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
bash scripts/cluster.sh start "$dir" "$PORT" "shared_buffers = 2GB" "max_wal_size = 8GB" "checkpoint_timeout = 30min" "log_min_messages = warning"
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$PORT" -U postgres "$@"; }
sql -f bench/schema.sql >/dev/null
for n in 200000 1000000; do
  for shape in distinct shared; do
    sql -c "TRUNCATE idem_keys"
    sql -v n="$n" -v req="$BODY" -v resp="$RESP" -v hdrs="$HDRS" <<'SQL'
CALL bench.populate('public.idem_keys', 'expired', 'expired', 1, :n, :'req', :'resp', :'hdrs');
SQL
    [ $shape = distinct ] || sql -c "UPDATE idem_keys SET expires_at = now() - interval '1 hour'" -c "VACUUM FULL idem_keys"
    sql -c "VACUUM ANALYZE idem_keys" -c CHECKPOINT
    t0=$(date +%s.%N); got=$(sql -c "SELECT idem_sweep()"); t1=$(date +%s.%N)
    echo "one idem_sweep() call, $n expired keys, $shape expiries: deleted $got in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
  done
done
