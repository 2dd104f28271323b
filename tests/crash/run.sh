#!/usr/bin/env bash
# Crash tests against a real server (make test, stage `crash`), bounded in time:
#   1. kill -9 of the backend between claim and finish (the dead inverter);
#   2. immediate shutdown of the server while clients run claim/finish cycles.
# Needs the extension installed. Prints the counts it checked; exits non-zero on any violation.
set -euo pipefail
cd "$(dirname "$0")"
dir=$(mktemp -d /tmp/idem-crash.XXXXXX) port=25352
trap 'bash ../../scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
bash ../../scripts/cluster.sh start "$dir" "$port"
suite=crash; source ../lib.sh
sql() { sql_at "$dir" "$port" "$@"; }
wait_for() { poll sql "$@"; }
wait_for_server() { wait_for "SELECT true" 60; }
sql -c 'CREATE EXTENSION idem_keys'

echo "--- 1. kill -9 of the backend between claim and finish"
# The owner claims, checkpoints "charged", then "calls the provider" (pg_sleep) and is killed there.
PGAPPNAME=crash-owner sql >"$dir/owner.out" 2>&1 <<'SQL' &
SELECT (idem_claim('crash', 'pay-1', '{"amount": 1000}'::jsonb, lease => '3 seconds')).token AS token \gset
SELECT idem_checkpoint('crash', 'pay-1', :token, 'charged', '{"charge": "ch_1"}');
SELECT pg_sleep(60);
SELECT idem_finish('crash', 'pay-1', :token, 201, '{"charge": "ch_1"}'::jsonb);
SQL
owner=$!
wait_for "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'crash-owner' AND wait_event = 'PgSleep')" 30
pid=$(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'crash-owner'")
kill -9 "$pid"
wait "$owner" && fail "the killed session reported success"
wait_for_server
[ "$(sql -c "SELECT (r).outcome || ' ' || (r).checkpoint FROM (SELECT idem_lookup('crash', 'pay-1') r) s")" = "in_progress charged" ] \
  || fail "after kill -9 the key is not in_progress with its checkpoint"
wait_for "SELECT EXISTS (SELECT FROM idem_stale() WHERE key = 'pay-1' AND attempt = 1)" 10
got=$(sql -c "SELECT (r).outcome, (r).attempt, (r).checkpoint, (r).checkpoint_state->>'charge', (r).token IS NOT NULL
                FROM (SELECT idem_claim('crash', 'pay-1', '{\"amount\": 1000}'::jsonb) r) s")
[ "$got" = "recovered|2|charged|ch_1|t" ] || fail "the retry after the lease got '$got', not recovered/2/charged"
echo "killed backend $pid mid-request; after restart: in_progress, listed by idem_stale, then recovered (attempt 2, checkpoint charged)"

echo "--- 2. immediate shutdown under claim/finish load"
clients=4 keys=3000
# Each client walks the same keys (two forwards, two backwards, so they collide) and, in one session,
# claims each; when it owns the key it finishes it with an answer naming its token. Every `claim` and
# `finish` line is an acknowledgement: the server answered it before the crash. A statement that failed
# prints `claim-failed`/`finish-failed` instead: psql can still run the next \echo after losing the
# connection, and \gset leaves the previous key's values in place, so echoing them would invent an answer.
# A claim that met the key's lock held by another client answers in_progress with attempt NULL, which
# \gset would leave unset: it is echoed as 0.
client_script() {
  local c=$1 i
  echo '\set ON_ERROR_STOP 0'
  for ((n = 0; n < keys; n++)); do
    if ((c % 2)); then i=$((keys - 1 - n)); else i=$n; fi
    cat <<SQL
\set key k$i
SELECT (r).outcome AS outcome, (r).token IS NOT NULL AS owns, coalesce((r).token, 0) AS token, coalesce((r).attempt, 0) AS attempt
  FROM (SELECT idem_claim('storm', :'key', jsonb_build_object('n', :'key'), lease => '2 seconds') r) s \gset
\if :ERROR
\echo claim-failed :key
\else
\echo claim :key :outcome :token :attempt
\if :owns
SELECT idem_finish('storm', :'key', :token, 200, jsonb_build_object('token', :token)) \gset
\if :ERROR
\echo finish-failed :key :token
\else
\echo finish :key :token
\endif
\endif
\endif
SQL
  done
}
for ((c = 0; c < clients; c++)); do client_script "$c" > "$dir/client$c.sql"; done
for ((c = 0; c < clients; c++)); do sql -f "$dir/client$c.sql" >"$dir/client$c.out" 2>/dev/null & done
# Let them get going, then pull the plug mid-stream.
wait_for "SELECT count(*) >= $((keys / 4)) FROM idem_keys WHERE scope = 'storm'" 60
bash ../../scripts/cluster.sh immediate "$dir"
wait || true
bash ../../scripts/cluster.sh start "$dir" "$port"
wait_for_server
cat "$dir"/client*.out > "$dir/acks"
finished=$(sql -c "SELECT count(*) FROM idem_keys WHERE scope = 'storm' AND finished_at IS NOT NULL")
[ "$(wc -l < "$dir/acks")" -gt 0 ] || fail "no client got an answer before the crash"
((finished < keys)) || fail "the clients finished everything before the crash; the test proved nothing"

# Load the acknowledgements into the database and check them there, with set-based queries.
sql -c "CREATE TABLE acks (kind text, key text, outcome text, token bigint, attempt int)"
awk '$1 == "claim" { print "claim\t" $2 "\t" $3 "\t" $4 "\t" $5 }
     $1 == "finish" || $1 == "finish-failed" { print $1 "\t" $2 "\t\\N\t" $3 "\t\\N" }' "$dir/acks" \
  | sql -c "COPY acks FROM STDIN"
lost=$(sql -c "SELECT count(*) FROM acks a WHERE kind = 'finish' AND NOT EXISTS (
                 SELECT FROM idem_lookup('storm', a.key) r
                  WHERE (r).outcome = 'replay' AND (r).status_code = 200 AND (r).response = jsonb_build_object('token', a.token))")
[ "$lost" = 0 ] || fail "$lost acknowledged finishes are missing or changed after the restart"
two_owners=$(sql -c "SELECT count(*) FROM (SELECT key, attempt FROM acks WHERE kind = 'claim' AND outcome IN ('claimed', 'recovered')
                     GROUP BY key, attempt HAVING count(*) > 1) d")
[ "$two_owners" = 0 ] || fail "$two_owners (key, attempt) pairs had two owners"
double_finish=$(sql -c "SELECT count(*) FROM (SELECT key FROM acks WHERE kind = 'finish' GROUP BY key HAVING count(*) > 1) d")
[ "$double_finish" = 0 ] || fail "$double_finish keys were finished twice"

# Every request whose finish was not acknowledged (including claims that committed but whose answer was
# lost with the connection) is retried once the leases are over: it must replay
# (the finish committed, only its answer was lost), recover (the claim committed) or claim (nothing did).
sleep 2.1
sql -c "CREATE TABLE retries AS
          SELECT k.key, (r).outcome FROM (SELECT key FROM acks WHERE kind = 'claim'
                                          UNION SELECT key FROM idem_keys WHERE scope = 'storm'
                                          EXCEPT SELECT key FROM acks WHERE kind = 'finish') k,
                 LATERAL idem_claim('storm', k.key, jsonb_build_object('n', k.key)) r"
bad=$(sql -c "SELECT count(*) FROM retries WHERE outcome NOT IN ('replay', 'recovered', 'claimed')")
[ "$bad" = 0 ] || fail "$bad retries got neither replay, recovered nor claimed"
echo "acknowledged before the crash: $(grep -c '^claim ' "$dir/acks") claims, $(grep -c '^finish ' "$dir/acks") finishes" \
     "($(grep -c '^finish-failed' "$dir/acks") failed: fenced off or cut by the crash); finished rows after restart: $finished of $keys keys"
echo "checked: $(sql -c "SELECT count(*) FROM acks WHERE kind = 'finish'") acknowledged finishes replay their answer;" \
     "0 keys with two owners of one attempt; 0 keys finished twice"
echo "retried $(sql -c "SELECT count(*) FROM retries") unacknowledged requests:" \
     "$(sql -c "SELECT string_agg(outcome || ' ' || n, ', ' ORDER BY outcome) FROM (SELECT outcome, count(*) n FROM retries GROUP BY 1) d")"
echo "crash: ok"
