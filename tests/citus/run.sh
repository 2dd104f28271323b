#!/usr/bin/env bash
# idem_keys on Citus 14.0.1, loopback only, once per edition (the extension, then the portable edition): a
# coordinator and two workers started by scripts/citus.sh, idem_keys distributed by scope.
#   1. tests/citus/checks.py: the contract through the coordinator, one hop per keyed verb, rows only in the
#      shards (amcheck), every SQLSTATE, a 12-way race, fencing, tenant binding, idem_stats and idem_stale;
#   2. tests/citus/faults.py: the sweep on every worker (each removes the expired answers of the shards it
#      holds; called, by the background worker, by pg_cron), each node's token range, and a worker stopped:
#      its scopes fail with 08006 naming the worker, the other worker's scopes are served; restarted, every
#      answer acknowledged before replays;
#   4. a third worker added and the shards rebalanced under a claim and replay load (tests/citus/load.py): no
#      key claimed twice, every finished key replays afterwards, the token ranges stay apart;
#   5. the extension's golden files of claim, checkpoint and finish (tests/pg_regress) through the coordinator,
#      compared with one server's expected output. (The other golden files set idem_keys settings per session,
#      poke the table, SET ROLE to roles that cannot log in, or sweep from the coordinator: each differs on
#      Citus as docs/scale-out.md says, and checks.py and faults.py check those behaviours there.)
#   6. the isolation specs of the keyed verbs (tests/isolation) through the coordinator, with Citus's own check
#      of which session waits (it sees waits on the workers) in the isolation tester's place, compared with
#      one server's expected output; claim_claim's REPEATABLE READ and SERIALIZABLE losers answer in_progress
#      there, not 40001 (tests/citus/expected, docs/scale-out.md). The sweep specs sweep from the coordinator,
#      which holds no shard, and claim_claim_copy_index copies the primary key of one server's table.
# Needs Citus (scripts/citus.sh ensure) and the extension installed for this major, and python3-psycopg. Bounded.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=citus; source tests/lib.sh
port=${CITUS_PORT:-25960}
work=$(mktemp -d /tmp/idem-citus.XXXXXX)
chmod 755 "$work"
load=""
cleanup() {
  stop_child "$load"
  for d in "$work"/*/; do bash scripts/citus.sh stop "$d"; done
  rm -rf "$work"
}
trap cleanup EXIT
# The isolation specs whose races are the keyed verbs' (section 6).
ISOLATION_SPECS="checkpoint_recover claim_claim claim_finish claim_implicit_transaction claim_open_transaction claim_wait recover_recover same_transaction"
url() { echo "host=127.0.0.1 port=$1 dbname=idem user=${2:-postgres}"; }
coordinator() { sql_at "$dir/coordinator" "$port" -d idem "$@"; }

# Every node also preloads pg_cron, and has the background sweeper off with a 1 s interval: faults.py turns
# each on in its turn to see it sweep the worker's shards.
export CITUS_SETTINGS="shared_preload_libraries = 'citus,idem_keys,pg_cron'
cron.database_name = 'idem'
cron.host = '127.0.0.1'
idem_keys.sweep_enabled = off
idem_keys.sweep_interval = '1s'"
for edition in extension portable; do
  dir=$work/$edition
  echo "--- $edition"
  bash scripts/citus.sh start "$dir" "$port" "$edition"
  python3 tests/citus/checks.py "$edition" "$(url "$port")" "$(url "$port" idem_app)" \
    "$(url $((port + 1)))" "$(url $((port + 2)))"

  # --- 2 and 3: the sweep on every worker, the token ranges, a worker stopped and restarted.
  python3 tests/citus/faults.py "$edition" "$dir" "$port"

  # --- 4. A worker added and the shards rebalanced under load.
  python3 tests/citus/load.py "$(url "$port" idem_app)" "$work/$edition-load.json" &
  load=$!
  wait_until 20 test -e "$work/$edition-load.json.started" || fail "$edition: the load did not start"
  bash scripts/citus.sh add "$dir" $((port + 3))
  coordinator -c "SET client_min_messages = warning" -c "SELECT citus_rebalance_start(shard_transfer_mode => 'force_logical')" >/dev/null
  wait_until 300 bash -c "[ \"\$(psql -X -At -h 127.0.0.1 -p $port -U postgres -d idem -c \"SELECT state FROM citus_rebalance_status()\")\" = finished ]" \
    || fail "$edition: the rebalance did not finish within 300 s: $(coordinator -c 'SELECT state, details FROM citus_rebalance_status()')"
  moved=$(coordinator -c "SELECT count(*) FROM pg_dist_shard_placement JOIN pg_dist_shard USING (shardid)
                          WHERE logicalrelid = 'idem_keys'::regclass AND nodeport = $((port + 3))")
  [ "$moved" -gt 0 ] || fail "$edition: no shard moved to the new worker"
  touch "$work/$edition-load.json.stop"
  wait "$load" || fail "$edition: the load during the rebalance failed"
  load=""
  python3 tests/citus/load.py --verify "$(url "$port" idem_app)" "$work/$edition-load.json"
  ranges=$(coordinator -c "SELECT count(*) FILTER (WHERE result = 't') || '/' || count(*) FROM run_command_on_all_nodes(
             \$\$SELECT (SELECT last_value >> 48 FROM idem_keys_token_seq) = (SELECT groupid FROM pg_dist_local_group)\$\$)")
  [ "$ranges" = 4/4 ] || fail "$edition: nodes whose token sequence is in their own range: $ranges"
  echo "PASS  [$edition] a third worker added and $moved shards moved to it under load; its tokens have a range of their own"

  # --- 5. The extension's golden files of the contract, unchanged, through the coordinator (three workers now).
  GOLDENS_HOST=127.0.0.1 GOLDENS_PORT=$port GOLDENS_DB=idem GOLDENS_SCRATCH=$work
  run_goldens regress tests/pg_regress claim checkpoint finish
  echo "PASS  [$edition] the golden files of claim, checkpoint and finish give one server's output through the coordinator"

  # --- 6. The isolation specs of the keyed verbs through the coordinator.
  coordinator -c "SELECT citus_internal.replace_isolation_tester_func()" >/dev/null
  GOLDENS_EXPECTED=tests/citus/expected run_goldens isolation tests/isolation $ISOLATION_SPECS
  echo "PASS  [$edition] the isolation specs of the keyed verbs give one server's interleavings through the coordinator"

  bash scripts/citus.sh stop "$dir"
done
echo "citus: all passed"
