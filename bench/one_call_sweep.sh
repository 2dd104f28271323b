#!/usr/bin/env bash
# One idem_sweep() call (what a pg_cron job runs) on a fresh server, timed: 200 000 and 1 000 000 expired keys,
# once with distinct expiries (as idem_finish writes them) and once all sharing one expiry (the worst case:
# within one transaction the batch cursor cannot step past a tie).
#   bash bench/one_call_sweep.sh          needs the extension installed (make install)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
start_server oc "${ONE_CALL_PORT:-25445}"
for n in 200000 1000000; do
  for shape in distinct shared; do
    sql -c "TRUNCATE idem_keys"
    fill_expired "$n"
    [ $shape = distinct ] || sql -c "UPDATE idem_keys SET expires_at = now() - interval '1 hour'" -c "VACUUM FULL idem_keys"
    sql -c "VACUUM ANALYZE idem_keys" -c CHECKPOINT
    t0=$(date +%s.%N); got=$(sql -c "SELECT idem_sweep()"); t1=$(date +%s.%N)
    echo "one idem_sweep() call, $n expired keys, $shape expiries: deleted $got in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
  done
done
