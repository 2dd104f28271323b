#!/usr/bin/env bash
# Failover under an HA manager: pg_auto_failover 2.0 from Debian (a monitor, a primary and a
# synchronous standby, all on loopback) while the Go, Python and Node services and four SQL clients run a
# retry storm through a multi-host connection string (target_session_attrs=read-write). Two scenarios, one
# after the other on the same formation:
#   postmaster: only the primary's postmaster is SIGKILLed; its keeper (the HA agent) stays alive, restarts it,
#               and the monitor may still fail over;
#   host:       the primary's keeper and postmaster are SIGKILLed together (the host is lost); the monitor
#               promotes the standby; the lost node's keeper is then started again and rejoins as a standby.
# After each (tests/failover/storm.py): every answer a client received still replays byte for byte, the
# provider charged nobody twice and charges equal successful payments, clients saw only errors they retry, and
# the longest pause is printed. Then the sweeper runs on the new primary and not on the standby.
# Needs the extension installed (release build) and tests/e2e/setup.sh. Every wait is bounded.
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=ha; source tests/lib.sh
export PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
bin=$("$PG_CONFIG" --bindir)
mport=${HA_PORT:-25601} http_port=${HA_HTTP_PORT:-25680}
ports=([1]=$((mport + 1)) [2]=$((mport + 2)))
base=$(mktemp -d /tmp/idem-ha.XXXXXX)
chmod 755 "$base"; chown postgres: "$base"
monitor_url="postgres://autoctl_node@127.0.0.1:$mport/pg_auto_failover?sslmode=disable"
# What an application is given: both nodes, the writable one wins; 2 s to give up on a dead host.
app_url="postgres://postgres@127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}/shop?target_session_attrs=read-write&connect_timeout=2"

# pg_autoctl keeps its state under the XDG directories: ours, inside $base, not the postgres user's home.
autoctl() {
  sudo -u postgres env XDG_CONFIG_HOME="$base/config" XDG_DATA_HOME="$base/share" XDG_RUNTIME_DIR="$base/run" \
    PATH="$bin:$PATH" PGHOST=127.0.0.1 pg_autoctl "$@"
}
# keeper_start NAME: `pg_autoctl run` in a session of its own, whose id (= its pid) goes to NAME.sid, so that
# the whole agent can be killed at once like a lost host.
keeper_start() { # (in a subshell: not a job of this script, whose kill bash would report)
  (sudo -u postgres env XDG_CONFIG_HOME="$base/config" XDG_DATA_HOME="$base/share" XDG_RUNTIME_DIR="$base/run" \
    PATH="$bin:$PATH" PGHOST=127.0.0.1 setsid bash -c 'echo $$ > "$1.sid"; exec pg_autoctl run --pgdata "$1"' _ "$base/$1" \
    >>"$base/$1.log" 2>&1 </dev/null &)
}
keeper_kill() { # keeper_kill NAME: SIGKILL the agent's whole session
  local sid; sid=$(cat "$base/$1.sid" 2>/dev/null) || return 0
  kill -9 -- "-$sid" 2>/dev/null || true
}
postmaster_pid() { head -1 "$base/$1/postmaster.pid" 2>/dev/null; }
on_monitor() { psql -X -q -At -h 127.0.0.1 -p "$mport" -U autoctl_node -d pg_auto_failover -c "$1"; }
on_node() { psql -X -q -At -h 127.0.0.1 -p "${ports[$1]}" -U postgres -d shop -v ON_ERROR_STOP=1 -c "$2"; }

stop_all() {
  local name
  for name in node2 node1 monitor; do
    [ -d "$base/$name" ] || continue
    # The agent first, or it restarts the server we stop; only its own processes: a SIGKILLed postmaster
    # would orphan children that do not watch for its death (the monitor's health check workers).
    if [ -f "$base/$name.sid" ]; then pkill -9 -s "$(cat "$base/$name.sid")" pg_autoctl || true; fi
    if [ -f "$base/$name/postmaster.pid" ]; then
      sudo -u postgres "$bin/pg_ctl" -D "$base/$name" -m immediate -w -t 10 stop >/dev/null 2>&1 || true
    fi
    kill_processes_in "$base/$name"
  done
  return 0
}
storm_pid=""
on_exit() {
  local rc=$?
  stop_child "$storm_pid"
  if ((rc)); then
    on_monitor "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid" 2>/dev/null || true
    for log in "$base"/node1.log "$base"/node2.log "$base"/storm/*.log; do
      if [ -f "$log" ]; then echo "--- last lines of $log"; tail -12 "$log"; fi
    done
  fi
  stop_all
  rm -rf "$base"
}
trap on_exit EXIT

# The formation's state as "node1:primary node2:secondary", reported states only when they are also the goals.
formation() {
  on_monitor "SELECT string_agg(nodename || ':' || CASE WHEN reportedstate = goalstate THEN reportedstate::text ELSE 'moving' END, ' ' ORDER BY nodename) FROM pgautofailover.node"
}
primary_node() { on_monitor "SELECT nodeid FROM pgautofailover.node WHERE reportedstate = 'primary' AND goalstate = 'primary'"; }
healthy() { # one primary and one secondary, both settled, and the standby synchronous
  local f; f=$(formation)
  [ "$f" = "node1:primary node2:secondary" ] || [ "$f" = "node1:secondary node2:primary" ] || return 1
  [ "$(on_node "$(primary_node)" "SELECT sync_state FROM pg_stat_replication WHERE application_name LIKE 'pgautofailover_standby_%'")" = quorum ]
}
# A new standby's pg_basebackup waits for the primary's next checkpoint, which pg_autoctl does not hurry: we do.
wait_healthy() { # wait_healthy SECONDS
  local deadline=$((SECONDS + $1)) p
  until healthy 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    p=$(primary_node 2>/dev/null) || p=""
    if [ -n "$p" ]; then on_node "$p" "CHECKPOINT" >/dev/null 2>&1 || true; fi
    sleep 1
  done
}

# --- The formation. Tight health checks, so a failover takes seconds, not the default minute.
autoctl create monitor --pgdata "$base/monitor" --pgport "$mport" --hostname 127.0.0.1 --auth trust --no-ssl \
  >>"$base/monitor.log" 2>&1
cat <<EOF | sudo -u postgres tee -a "$base/monitor/postgresql.conf" >/dev/null
listen_addresses = '127.0.0.1'
unix_socket_directories = '$base'
logging_collector = off
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 4000
pgautofailover.primary_demote_timeout = 10000
pgautofailover.startup_grace_period = 4000
EOF
keeper_start monitor
wait_until 30 on_monitor "SELECT 1" || fail "the monitor did not start"

node_create() { # node_create N
  autoctl create postgres --pgdata "$base/node$1" --pgport "${ports[$1]}" --pghost 127.0.0.1 --listen 127.0.0.1 \
    --hostname 127.0.0.1 --name "node$1" --dbname shop --auth trust --no-ssl --monitor "$monitor_url" \
    >>"$base/node$1.log" 2>&1
}
# node1 first, alone; our settings go after pg_autoctl's include, so they win, and node2 gets them with the
# base backup. pg_autoctl sizes shared_buffers for a dedicated machine: three servers share this one.
node_create 1
cat <<EOF | sudo -u postgres tee -a "$base/node1/postgresql.conf" >/dev/null
unix_socket_directories = '$base'
shared_preload_libraries = 'pg_stat_statements,idem_keys'
shared_buffers = '128MB'
logging_collector = off
idem_keys.sweep_databases = 'shop'
idem_keys.sweep_interval = '1s'
EOF
keeper_start node1
wait_until 60 bash -c "[ \"\$(psql -X -At -h 127.0.0.1 -p $mport -U autoctl_node -d pg_auto_failover -c \"SELECT reportedstate FROM pgautofailover.node WHERE nodename = 'node1'\")\" = single ]" \
  || fail "node1 did not become a single primary"
wait_until 30 on_node 1 "SELECT 1" || fail "node1 does not accept connections"
on_node 1 "CREATE EXTENSION idem_keys" >/dev/null
node_create 2
keeper_start node2
wait_healthy 120 || fail "the formation did not become primary + synchronous secondary"
echo "ha: pg_auto_failover $(autoctl --version | head -1 | awk '{print $3}'): $(formation), synchronous_standby_names = '$(on_node 1 "SHOW synchronous_standby_names")', idem_keys $(on_node 1 "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'")"

sweeper_check() { # the sweeper's launcher runs on the primary, and nothing of it on the standby
  local p=$1 s=$((3 - $1)) q="SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'idem_keys launcher'"
  wait_until 20 bash -c "[ \"\$(psql -X -At -h 127.0.0.1 -p ${ports[$p]} -U postgres -d shop -c \"$q\")\" = 1 ]" \
    || fail "no sweeper launcher on the primary node$p"
  [ "$(on_node "$s" "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'idem_keys%'")" = 0 ] \
    || fail "a sweeper or its launcher runs on the standby node$s"
  # And it sweeps there: expired answers go (a key with a 1 s retention, then a wait of a few intervals).
  on_node "$p" "SELECT idem_finish('ha-sweep', 'k', (idem_claim('ha-sweep', 'k', '{}'::jsonb)).token, 200, NULL::jsonb, retention => '1 second')" >/dev/null
  wait_until 20 bash -c "[ \"\$(psql -X -At -h 127.0.0.1 -p ${ports[$p]} -U postgres -d shop -c \"SELECT count(*) FROM idem_keys WHERE scope = 'ha-sweep'\")\" = 0 ]" \
    || fail "the sweeper on the primary node$p did not remove an expired answer"
  echo "ha: the sweeper runs on the primary (node$p) only, and sweeps there"
}

# --- The scenarios: a storm around each fault, the checks after it.
mkdir -p "$base/storm"
scenario() { # scenario NAME FAULT-FUNCTION
  local name=$1 fault=$2 old new
  old=$(primary_node)
  rm -f "$base/storm/stop"
  timeout --kill-after=10 400 examples/python/.venv/bin/python -B tests/failover/storm.py --scenario "$name" \
    --database-url "$app_url" --workdir "$base/storm" --base-port "$http_port" --stop-file "$base/storm/stop" &
  storm_pid=$! # global: on_exit stops a storm that a failed check left running
  sleep 8 # the storm reaches full speed
  echo "ha ($name): fault on the primary node$old at $(date +%T)"
  "$fault" "$old"
  wait_healthy 180 || fail "($name) the formation did not settle again"
  new=$(primary_node)
  echo "ha ($name): settled at $(date +%T): $(formation)"
  sleep 8 # the storm runs on against the settled formation
  touch "$base/storm/stop"
  wait "$storm_pid" || { storm_pid=""; fail "($name) the storm's checks failed"; }
  storm_pid=""
  sweeper_check "$new"
}

postmaster_crash() { # only the postmaster dies; its keeper lives and restarts it
  kill -9 "$(postmaster_pid "node$1")"
}
host_lost() { # the whole node: agent and server; it comes back only after the monitor failed over
  keeper_kill "node$1"
  kill -9 "$(postmaster_pid "node$1")" 2>/dev/null || true
  wait_until 20 no_process_in "$base/node$1" || fail "node$1's server outlived its postmaster"
  local other=$((3 - $1))
  wait_until 120 bash -c "[ \"\$(psql -X -At -h 127.0.0.1 -p $mport -U autoctl_node -d pg_auto_failover -c \"SELECT reportedstate FROM pgautofailover.node WHERE nodeid = $other\")\" = wait_primary ]" \
    || fail "the monitor did not promote node$other"
  echo "ha (host): node$other promoted at $(date +%T); node$1 comes back"
  # Its lock files outlive it where PID 1 reaps no zombies (containers); nothing of it runs (checked above).
  rm -f "$base/node$1/postmaster.pid" "$base/.s.PGSQL.${ports[$1]}" "$base/.s.PGSQL.${ports[$1]}.lock"
  keeper_start "node$1"
}

scenario postmaster postmaster_crash
scenario host host_lost
echo "ha: both scenarios passed"
