#!/usr/bin/env bash
# One sweep on a fresh server, timed: once as one idem_sweep() call (one transaction) and once as
# CALL idem_sweep_paced(delay => '0') (a commit per batch, without the rests, so only the work is timed).
# 200 000 and 1 000 000 expired keys, with distinct expiries (as idem_finish writes them) and all sharing one
# expiry (the worst case: within one transaction the batch cursor cannot step past a tie, and the index
# entries of rows the transaction deleted cannot be marked dead).
#   bash bench/one_call_sweep.sh                                   needs the extension installed (make install)
#   ONE_CALL_SIZES=200000 ONE_CALL_BATCH=1000 bash bench/one_call_sweep.sh   other sizes, another batch size
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
start_server oc "${ONE_CALL_PORT:-25445}"
batch=${ONE_CALL_BATCH:-$(sql -c "LOAD 'idem_keys'" -c 'SHOW idem_keys.sweep_batch_size')}  # the default, once the library is loaded
for n in ${ONE_CALL_SIZES:-200000 1000000}; do
  for shape in distinct shared; do
    for sweep in "SELECT idem_sweep($batch)" "CALL idem_sweep_paced($batch, delay => '0')"; do
      sql -c "TRUNCATE idem_keys"
      fill_expired "$n"
      [ $shape = distinct ] || sql -c "UPDATE idem_keys SET expires_at = now() - interval '1 hour'" -c "VACUUM FULL idem_keys"
      sql -c "VACUUM ANALYZE idem_keys" -c CHECKPOINT
      t0=$(date +%s.%N); got=$(sql -c "$sweep"); t1=$(date +%s.%N)
      echo "$sweep: $n expired keys, $shape expiries: deleted $got in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
    done
  done
done
