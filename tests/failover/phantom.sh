#!/usr/bin/env bash
# No phantom replay, deterministic, with plain streaming replication on loopback: a primary with a
# synchronous standby; the standby stops, so a finish commits locally and waits for it; the primary's postmaster
# is SIGKILLed and restarts alone, its crash recovery making that finish visible although the standby never had
# it. idem_keys must not serve it as a replay then. Two endings:
#   promote: the primary stops for good and the standby is promoted: the finish is gone there, and every
#            answer a client received still replays;
#   return:  the standby comes back and receives the finish: the replay is served as soon as it confirms.
# Both with and without shared_preload_libraries (the shared flag, or one per backend). Then a finish by a
# session whose own synchronous_commit is off: it must still wait for the standby before its answer replays.
# Needs the extension installed. Bounded: every wait below has a limit.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=phantom; source tests/lib.sh
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
export PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
pport=${FAILOVER_PORT:-25491} sport=$((${FAILOVER_PORT:-25491} + 1))
base=$(mktemp -d /tmp/idem-phantom.XXXXXX)
chmod 755 "$base"
primary=$base/primary standby=$base/standby
stop_all() {
  bash scripts/cluster.sh stop "$standby" 2>/dev/null || true
  bash scripts/cluster.sh stop "$primary" 2>/dev/null || true
}
on_exit() {
  local rc=$?
  if ((rc)); then
    for log in "$primary/server.log" "$standby/server.log"; do
      [ -f "$log" ] && { echo "--- last lines of $log"; tail -8 "$log"; }
    done
  fi
  stop_all
  rm -rf "$base"
}
trap on_exit EXIT
on() { sql_at "$@"; }
p() { on "$primary" "$pport" "$@"; }
s() { on "$standby" "$sport" "$@"; }
# sqlstate DIR PORT SQL: the SQLSTATE the statement ends with (00000 when it succeeds), under a 3 s timeout.
sqlstate() {
  local out
  out=$(on "$1" "$2" -v VERBOSITY=sqlstate -c "SET statement_timeout = '3s'" -c "$3" 2>&1) && { echo 00000; return; }
  grep -oP 'ERROR:\s+\K[0-9A-Z]{5}' <<<"$out" | tail -1 || echo "none ($out)"
}
claim_sql() { echo "SELECT (idem_claim('ha', '$1', '{\"amount\": 1}'::jsonb)).outcome"; }
pair() { # pair PRELOAD(on|off): a primary with the extension and its synchronous standby, streaming
  stop_all
  rm -rf "$primary" "$standby"
  local preload=""; [ "$1" = on ] && preload="shared_preload_libraries = 'idem_keys'"
  bash scripts/cluster.sh start "$primary" "$pport" "wal_level = replica" "max_wal_senders = 5" \
    "synchronous_commit = on" "$preload" "idem_keys.sweep_enabled = off"
  p -c "CREATE EXTENSION idem_keys"
  mkdir -p "$standby"; chown postgres: "$standby"
  sudo -u postgres "$bin/pg_basebackup" -h "$primary" -p "$pport" -U postgres -D "$standby/data" -X stream --checkpoint=fast
  printf "port = %s\nunix_socket_directories = '%s'\nprimary_conninfo = 'host=%s port=%s user=postgres application_name=s1'\n" \
    "$sport" "$standby" "$primary" "$pport" | sudo -u postgres tee -a "$standby/data/postgresql.conf" >/dev/null
  sudo -u postgres touch "$standby/data/standby.signal"
  bash scripts/cluster.sh start "$standby" "$sport"
  # Synchronous only now: until the standby streams, every commit (CREATE EXTENSION's too) would wait for it.
  p -c "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (s1)'" -c "SELECT pg_reload_conf()" >/dev/null
  wait_until 20 bash -c "[ \"\$(psql -X -At -h '$primary' -p $pport -U postgres -c \"SELECT sync_state FROM pg_stat_replication WHERE application_name = 's1'\")\" = quorum ]" \
    || fail "the standby did not become synchronous"
}
# one_waits_for_standby: exactly one backend waits for the synchronous standby to confirm its commit.
one_waits_for_standby() { [ "$(p -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")" = 1 ]; }
promote_standby() { # the primary is lost for good; the standby takes over
  bash scripts/cluster.sh immediate "$primary"
  wait || true
  bash scripts/cluster.sh start "$standby" "$sport"
  sudo -u postgres "$bin/pg_ctl" -D "$standby/data" -w promote >/dev/null
  wait_until 20 bash -c "[ \"\$(psql -X -At -h '$standby' -p $sport -U postgres -c 'SELECT pg_is_in_recovery()')\" = f ]" \
    || fail "the standby was not promoted"
}
setup() { # setup PRELOAD(on|off)
  pair "$1"

  # An answer before the trouble, confirmed by the standby, and a claim whose finish will be cut off.
  local token
  token=$(p -c "SELECT (idem_claim('ha', 'kept', '{\"amount\": 1}'::jsonb)).token")
  p -c "SELECT idem_finish('ha', 'kept', $token, 201, '\x6b657074'::bytea)" >/dev/null
  [ "$(p -c "$(claim_sql kept)")" = replay ] || fail "no replay before the crash"
  token=$(p -c "SELECT (idem_claim('ha', 'lost', '{\"amount\": 1}'::jsonb)).token")
  p -c "SELECT (idem_claim('ha', 'busy', '{}'::jsonb, lease => '1h')).outcome" >/dev/null

  # The standby goes away; the finish commits locally and waits for it.
  bash scripts/cluster.sh stop "$standby"
  p -c "SELECT idem_finish('ha', 'lost', $token, 201, '\x6c6f7374'::bytea)" >/dev/null 2>&1 &
  wait_until 10 one_waits_for_standby || fail "the finish is not waiting for the synchronous standby"

  # The primary's postmaster dies; its backends follow; it restarts alone and recovers the finish.
  kill -9 "$(head -1 "$primary/data/postmaster.pid")"
  wait_until 20 no_process_in "$primary/data" || fail "the primary's processes outlived its postmaster"
  wait || true
  # The dead postmaster's PID may linger as a zombie where PID 1 does not reap (containers), and its lock file
  # and socket lock files would then stop the restart; nothing of it runs any more (checked above), so they
  # are stale.
  rm -f "$primary/data/postmaster.pid" "$primary/.s.PGSQL.$pport" "$primary/.s.PGSQL.$pport.lock"
  bash scripts/cluster.sh start "$primary" "$pport"
  [ "$(p -c "SELECT finished_at IS NOT NULL FROM idem_keys WHERE key = 'lost'")" = t ] \
    || fail "crash recovery did not make the cut-off finish visible: the scenario did not happen"

  # The hole: that answer exists here only. Neither a claim nor a lookup may serve it; both wait and end
  # with their timeout (57014), which a client retries.
  local got
  got=$(sqlstate "$primary" "$pport" "$(claim_sql lost)")
  [ "$got" = 57014 ] || fail "a claim of the unconfirmed answer ended in $got, not the timeout 57014 (a phantom replay?)"
  got=$(sqlstate "$primary" "$pport" "SELECT (idem_lookup('ha', 'lost')).outcome")
  [ "$got" = 57014 ] || fail "idem_lookup of the unconfirmed answer ended in $got, not the timeout 57014"
  # A busy key is answered at once (a read: nothing to commit, so nothing waits for the standby either):
  # in_progress promises nothing a failover could take away.
  got=$(on "$primary" "$pport" -c "SET statement_timeout = '3s'" -c "SELECT (idem_claim('ha', 'busy', '{}'::jsonb)).outcome")
  [ "$got" = in_progress ] || fail "a busy key's claim answered $got, not in_progress at once"
  echo "phantom (preload $1): after the crash, replays of the answer the standby never had wait (57014 at the timeout)"
}

for preload in on off; do
  setup "$preload"
  # Ending 1: the primary is lost for good; the standby is promoted without the finish.
  promote_standby
  [ "$(s -c "SELECT finished_at IS NULL FROM idem_keys WHERE key = 'lost'")" = t ] || fail "the promoted standby has the finish"
  [ "$(s -c "$(claim_sql kept)")" = replay ] || fail "the answer the client received before the crash does not replay"
  [ "$(s -c "$(claim_sql lost)")" = in_progress ] || fail "the cut-off key is not in_progress on the promoted standby"
  echo "phantom (preload $preload), promote: the finish is gone, as no client was told it; the answer a client got replays"

  setup "$preload"
  # Ending 2: the standby comes back and receives the finish: the replay is served once it confirms.
  bash scripts/cluster.sh start "$standby" "$sport"
  [ "$(on "$primary" "$pport" -c "SET statement_timeout = '30s'" -c "$(claim_sql lost)")" = replay ] \
    || fail "no replay after the standby confirmed"
  [ "$(s -c "SELECT finished_at IS NOT NULL FROM idem_keys WHERE key = 'lost'")" = t ] || fail "the standby lacks the finish"
  echo "phantom (preload $preload), return: the standby received the finish, and the replay is served"
done

# A finishing session's own synchronous_commit (off here; a worker role's latency setting) must not make its
# answer replayable before the synchronous standby has it: the finish waits for the standby, a retry meanwhile
# waits for the finish, and a failover then loses nothing a client was told.
pair on
token=$(p -c "SELECT (idem_claim('ha', 'async', '{\"amount\": 1}'::jsonb)).token")
bash scripts/cluster.sh stop "$standby"
p -c "SET synchronous_commit = off" -c "SELECT idem_finish('ha', 'async', $token, 201, '\x6173796e63'::bytea)" >/dev/null 2>&1 &
wait_until 10 one_waits_for_standby \
  || fail "a finish under synchronous_commit = off returned without the synchronous standby (replayable, then lost by a failover)"
# A retry meets the finish's row version, whose transaction has not ended: it waits for it, as INSERT … ON
# CONFLICT does, and ends with its timeout, which a client retries; it is never served the answer.
got=$(sqlstate "$primary" "$pport" "$(claim_sql async)")
[ "$got" = 57014 ] || fail "a retry during that finish ended in $got, not the timeout 57014 (a replay?)"
promote_standby
[ "$(s -c "$(claim_sql async)")" = in_progress ] || fail "the promoted standby does not have the key in progress"
echo "phantom: a finish under synchronous_commit = off waits for the synchronous standby; a retry meanwhile waits too (57014 at its timeout), and the failover loses no answer a client saw"
