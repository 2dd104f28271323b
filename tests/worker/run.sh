#!/usr/bin/env bash
# The sweeper background worker and pg_cron, against a real server with both preloaded (make test, stage
# `worker`). Bounded polls everywhere; the only fixed sleeps prove that something did NOT happen.
set -euo pipefail
cd "$(dirname "$0")"
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
dir=$(mktemp -d /tmp/idem-worker.XXXXXX) port=25354
suite=worker; source ../lib.sh
source ../../scripts/pg_major.sh
major=$(pg_major)
trap 'rc=$?; ((rc)) && tail -20 "$dir/server.log" >&2; jobs -p | xargs -r kill 2>/dev/null; bash ../../scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
# pg_cron is part of every major's test but those NO_PG_CRON_MAJORS names (16's build has none); there, a
# missing pg_cron is expected, and anywhere else it fails the server's start.
with_cron=yes
[[ " $NO_PG_CRON_MAJORS " == *" $major "* ]] && with_cron=
bash ../../scripts/cluster.sh start "$dir" "$port" \
  "shared_preload_libraries = 'idem_keys${with_cron:+,pg_cron}'" \
  ${with_cron:+"cron.database_name = 'postgres'" "cron.host = '$dir'"} "idem_keys.sweep_interval = '1s'"
sql() { sql_at "$dir" "$port" "$@"; }
wait_for() { poll sql "$@"; }
set_and_reload() { sql -c "ALTER SYSTEM SET $1" -c "SELECT pg_reload_conf()" >/dev/null; }
# seed_expired SCOPE N: N finished keys whose retention already ended (written directly, for speed).
seed_expired() {
  sql -v scope="$1" -v n="$2" >/dev/null <<'SQL'
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at,
                       finished_at, expires_at, status_code, response)
SELECT :'scope', 'k' || g, '\x00', nextval('idem_keys_token_seq'), 1, now(), now(), now(),
       now() - interval '2 seconds', now() - interval '1 second', 200, '{"charge": "ch"}'
  FROM generate_series(1, :n) g;
SQL
}
expired() { sql -v scope="$1" <<< "SELECT count(*) FROM idem_keys WHERE scope = :'scope' AND expires_at <= now();"; }
sweeper_pid() { sql -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'idem_keys sweeper' AND datname = 'postgres'"; }
launcher_pid() { sql -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'idem_keys launcher'"; }

sql -c 'CREATE EXTENSION idem_keys' -c 'CREATE DATABASE plain' -c 'CREATE DATABASE swept'
sql -d swept -c 'CREATE EXTENSION idem_keys'
# plain has no extension; gone names a database that does not exist (yet).
set_and_reload "idem_keys.sweep_databases = 'postgres, plain, swept, gone'"
echo "--- expired keys go within an interval; live and unexpired keys stay"
seed_expired w1 500
sql -c "SELECT idem_claim('w1', 'live', '{}'::jsonb, lease => '1 hour')" \
    -c "SELECT idem_finish('w1', 'kept', (idem_claim('w1', 'kept', '{}'::jsonb)).token, 200, NULL::jsonb)" >/dev/null
t0=$SECONDS
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'w1' AND expires_at <= now()" 15
[ "$(sql -c "SELECT string_agg(key, ',' ORDER BY key) FROM idem_keys WHERE scope = 'w1'")" = "kept,live" ] \
  || fail "the sweeper removed a live or unexpired key"
echo "500 expired keys swept within $((SECONDS - t0)) s; the live claim and the unexpired answer stay"
wait_for "SELECT last_sweep_at IS NOT NULL AND removed_since_start >= 500 FROM idem_stats()" 5
echo "idem_stats: $(sql -c "SELECT last_sweep_removed, removed_since_start FROM idem_stats()")"

echo "--- a swept database can be renamed, dropped and made again; its name is reported once while it is gone"
sql_swept() { sql_at "$dir" "$port" -d "$1" "${@:2}"; }
seed_in() { # seed_in DATABASE N: N expired keys in that database
  sql_swept "$1" -v n="$2" >/dev/null <<'SQL'
INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at,
                       finished_at, expires_at, status_code, response)
SELECT 'db', 'k' || g, '\x00', nextval('idem_keys_token_seq'), 1, now(), now(), now(),
       now() - interval '2 seconds', now() - interval '1 second', 200, '{}'
  FROM generate_series(1, :n) g;
SQL
}
seed_in swept 100
poll "sql_swept swept" "SELECT count(*) = 0 FROM idem_keys" 15
sql -c 'ALTER DATABASE swept RENAME TO swept_renamed' || fail "a swept database could not be renamed"
sql -c 'CREATE DATABASE swept_copy TEMPLATE swept_renamed' || fail "a swept database could not be a template"
sleep 3   # three intervals: the missing name is looked up three more times and must not be reported again
[ "$(grep -c 'not sweeping "swept" named in idem_keys.sweep_databases' "$dir/server.log")" = 1 ] \
  || fail "the renamed database's name was not reported exactly once: $(grep -c 'not sweeping "swept"' "$dir/server.log")"
sql -c 'DROP DATABASE swept_renamed' -c 'DROP DATABASE swept_copy' || fail "a swept database could not be dropped"
sql -c 'CREATE DATABASE swept'
sql -d swept -c 'CREATE EXTENSION idem_keys'
seed_in swept 100
poll "sql_swept swept" "SELECT count(*) = 0 FROM idem_keys" 15
[ "$(grep -c 'not sweeping "gone" named in idem_keys.sweep_databases' "$dir/server.log")" = 1 ] \
  || fail "the missing database gone was not reported exactly once"
echo "renamed, used as a template and dropped while named (no process holds it between passes); made again: swept;" \
     "reported once each: $(grep -m1 -o 'not sweeping "gone".*' "$dir/server.log")"

echo "--- a reload changes the interval, both ways"
set_and_reload "idem_keys.sweep_interval = '1h'"
sleep 2   # let the sweeper take the reload; from now on it waits an hour
seed_expired w2 100
sleep 3
[ "$(expired w2)" = 100 ] || fail "the sweeper still swept every second after sweep_interval = 1h"
set_and_reload "idem_keys.sweep_interval = '1s'"
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'w2'" 10
echo "interval 1h: nothing swept for 3 s; back to 1s: swept"

echo "--- an error in a batch is logged and retried; the launcher lives on"
set_and_reload "idem_keys.sweep_interval = '1h'"
sleep 2
seed_expired w3 50
pid=$(launcher_pid)
sql -c 'ALTER TABLE idem_keys RENAME TO idem_keys_away'
set_and_reload "idem_keys.sweep_interval = '1s'"
deadline=$((SECONDS + 10))
until grep -q 'idem_keys sweeper: sweeping database "postgres" failed' "$dir/server.log"; do
  ((SECONDS < deadline)) || fail "no logged sweep error within 10 s"; sleep 0.1
done
sql -c 'ALTER TABLE idem_keys_away RENAME TO idem_keys'
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'w3'" 10
[ "$(launcher_pid)" = "$pid" ] || fail "the launcher was replaced after a sweep error; it should have survived it"
[ "$(sql -c "SELECT sweep_errors > 0 FROM idem_stats()")" = t ] || fail "idem_stats does not count the error"
echo "logged: $(grep -m1 -o 'idem_keys sweeper: sweeping database "postgres" failed.*' "$dir/server.log")"
echo "the next pass swept after the table came back (same launcher, pid $pid); idem_stats counts the error"

echo "--- a database without the extension stays quiet"
if grep -E 'ERROR|FATAL|WARNING' "$dir/server.log" | grep -v 'idem_keys_away\|idem_keys sweeper: sweeping database "postgres" failed' \
   | grep -i 'plain\|gone\|swept\|idem_keys'; then
  fail "the log has errors about the idem_keys workers (above)"
fi
grep -q 'not sweeping "plain"' "$dir/server.log" && fail "plain exists; it must not be reported"
echo "passes over 'plain' (no extension) leave no error, warning or fatal line in the log"

echo "--- a backlog of 200 000 is swept batch by batch; claims on it never wait long"
set_and_reload "idem_keys.sweep_interval = '1h'"
sleep 2
seed_expired backlog 200000
sql -c 'VACUUM ANALYZE idem_keys'
cat > "$dir/claim.sql" <<'SQL'
\set k random(1, 200000)
SELECT idem_claim('backlog', 'k' || :k, '{"n": 1}'::jsonb);
SQL
(cd "$dir" && "$bin/pgbench" -n -M prepared -h "$dir" -p "$port" -U postgres -c 2 -T 8 -l --log-prefix=claims \
   -f claim.sql postgres >"$dir/pgbench.out" 2>&1) &
bench=$!
sleep 1
set_and_reload "idem_keys.sweep_interval = '1s'"
t0=$SECONDS
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'backlog' AND expires_at <= now()" 120
swept_in=$((SECONDS - t0))
wait "$bench" || { cat "$dir/pgbench.out"; fail "pgbench failed"; }
claims=$(cat "$dir"/claims.* | wc -l)
worst_ms=$(cat "$dir"/claims.* | awk 'BEGIN { m = 0 } $3 > m { m = $3 } END { printf "%.1f", m / 1000 }')
longest_batch=$(sql -c "SELECT round(extract(epoch FROM longest_batch) * 1000, 1) FROM idem_sweep_status()")
echo "200000 expired keys swept in ${swept_in} s, $(sql -c 'SHOW idem_keys.sweep_batch_size') per transaction and" \
     "$(sql -c 'SHOW idem_keys.sweep_delay') between; $claims concurrent claims on those keys," \
     "worst claim ${worst_ms} ms, longest sweep batch ${longest_batch} ms"
awk -v w="$worst_ms" 'BEGIN { exit !(w < 2000) }' || fail "a claim waited ${worst_ms} ms on the sweep"

echo "--- idem_keys.sweep_delay paces the batches; a reload changes it mid-sweep"
set_and_reload "idem_keys.sweep_interval = '1h'"
sleep 2
set_and_reload "idem_keys.sweep_delay = '1s'"
sql -c "ALTER SYSTEM SET idem_keys.sweep_batch_size = 100" >/dev/null
seed_expired paced 1000
set_and_reload "idem_keys.sweep_interval = '1s'"
wait_for "SELECT count(*) < 1000 FROM idem_keys WHERE scope = 'paced'" 10
sleep 2   # at one batch a second at most 3 more batches go meanwhile; flat out all 1000 would be gone
left=$(expired paced)
((left >= 500)) || fail "with sweep_delay = 1s only $left of 1000 keys were left 2 s into the sweep"
sql -c "ALTER SYSTEM RESET idem_keys.sweep_batch_size" >/dev/null
set_and_reload "idem_keys.sweep_delay = 0"
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'paced'" 10
echo "sweep_delay = 1s: $left of 1000 keys left 2 s into the sweep (100 per batch); after a reload to 0 the rest went at once"
set_and_reload "idem_keys.sweep_delay = '2ms'"

echo "--- SIGTERM ends a busy sweeper within a batch; the next pass sweeps on"
set_and_reload "idem_keys.sweep_interval = '1h'"
sleep 2
seed_expired term 200000
set_and_reload "idem_keys.sweep_interval = '1s'"
wait_for "SELECT count(*) < 195000 FROM idem_keys WHERE scope = 'term'" 20
pid=$(sweeper_pid)
start_ns=$(date +%s%N)
kill -TERM "$pid"
deadline=$((SECONDS + 10))
while kill -0 "$pid" 2>/dev/null; do ((SECONDS < deadline)) || fail "the sweeper ignored SIGTERM for 10 s"; sleep 0.01; done
stop_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
left=$(expired term)
((left > 0)) || fail "the backlog was gone before SIGTERM; the test proved nothing"
((stop_ms < 1000)) || fail "the sweeper took ${stop_ms} ms to stop"
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'term' AND expires_at <= now()" 60
echo "busy sweeper (pid $pid) stopped ${stop_ms} ms after SIGTERM with $left keys left; the next pass swept the rest"

echo "--- kill -9 of a busy sweeper: the server restarts, the launcher comes back and sweeps"
set_and_reload "idem_keys.sweep_interval = '1h'"
sleep 2
seed_expired w6 200000
set_and_reload "idem_keys.sweep_interval = '1s'"
wait_for "SELECT count(*) < 195000 FROM idem_keys WHERE scope = 'w6'" 20
pid=$(sweeper_pid)
[ -n "$pid" ] || fail "no sweeper was busy with the backlog"
kill -9 "$pid"
poll sql "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'idem_keys launcher'" 30
wait_for "SELECT count(*) = 0 FROM idem_keys WHERE scope = 'w6' AND expires_at <= now()" 60
echo "after kill -9 of sweeper pid $pid: a new launcher $(launcher_pid), expired keys swept again"

echo "--- sweep_enabled = off stops the sweepers; pg_cron sweeps instead, in more than one batch"
set_and_reload "idem_keys.sweep_enabled = off"
seed_expired off 100
sleep 3   # three intervals
[ "$(expired off)" = 100 ] || fail "a sweeper swept with sweep_enabled = off"
sql -c "DELETE FROM idem_keys WHERE scope = 'off'" >/dev/null
if [ -z "$with_cron" ]; then
  echo "sweep_enabled = off: nothing swept for three intervals; pg_cron: not available for PostgreSQL $major here (its build has" \
       "no pg_cron), so pg_cron's schedule is tested on the other majors only"
  echo "worker: ok"
  exit 0
fi
set_and_reload "idem_keys.sweep_batch_size = 100"
seed_expired cron 350
sql -c 'CREATE EXTENSION pg_cron' -c "SELECT cron.schedule('idem-sweep', '* * * * *', 'CALL idem_sweep_paced()')" >/dev/null
t0=$SECONDS
wait_for "SELECT EXISTS (SELECT FROM cron.job_run_details WHERE status = 'succeeded' AND command = 'CALL idem_sweep_paced()')
          AND NOT EXISTS (SELECT FROM idem_keys WHERE scope = 'cron')" 75
sql -c "SELECT cron.unschedule('idem-sweep')" >/dev/null
echo "pg_cron's CALL idem_sweep_paced() swept 350 keys (a commit per batch of 100) $((SECONDS - t0)) s after scheduling;" \
     "idem_stats: last sweep removed $(sql -c "SELECT last_sweep_removed FROM idem_stats()")"
echo "worker: ok"
