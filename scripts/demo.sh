#!/usr/bin/env bash
# `make demo`: the story, played against the throwaway server that the Makefile started.
set -euo pipefail
dir=$1 port=$2
psql_demo() { psql -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

psql_demo -c "CREATE EXTENSION idem_keys;"
major=$(psql_demo -At -c "SELECT current_setting('server_version_num')::int / 10000")
echo "idem_keys is installed in a throwaway PostgreSQL $major."
cat <<'TXT'
Every step below is plain SQL an HTTP handler runs, in any language.
The request body is the same JSON each time: {"amount": 1000, "currency": "EUR"}.
TXT

say "1. The double tap: the customer taps Pay twice on a flaky 3G link; both requests arrive at once"
# Two real sessions race for the same key; exactly one wins.
for tap in 1 2; do
  psql_demo -At -F ' ' -c "SELECT 'tap $tap ->', r.outcome, 'token=' || coalesce(r.token::text, '-'),
                                  'retry_after=' || coalesce(r.retry_after::text, '-')
                             FROM idem_claim('shop', 'pay-7f3a', '{\"amount\": 1000, \"currency\": \"EUR\"}'::jsonb) AS r" &
done
wait
echo "   -> one handler owns the key and calls the provider; the other answers 409 with Retry-After."

say "2. The charge succeeds; the owner stores the answer"
psql_demo <<'SQL'
SELECT idem_finish('shop', 'pay-7f3a', token, 201, '{"charge": "ch_1", "status": "succeeded"}'::jsonb,
                   headers => '{"Location": "/payments/ch_1"}'::jsonb)
  FROM idem_keys WHERE scope = 'shop' AND key = 'pay-7f3a' \gset
\echo '   idem_finish(..., 201, {"charge": "ch_1", ...}) stored.'
SQL

say "3. The response died on the way back; the app retries with the same key and body"
psql_demo -c "\pset footer off" -c "SELECT r.outcome, r.status_code, r.response, r.headers
  FROM idem_claim('shop', 'pay-7f3a', '{\"currency\": \"EUR\", \"amount\": 1000.00}'::jsonb) AS r"
echo "   -> replay: the original 201 and body, sent with 'Idempotent-Replayed: true'. Charged once."
echo "      (Key order and 1000 vs 1000.00 do not matter: the fingerprint is over the jsonb value.)"

say "4. A client bug: the same key with another body"
psql_demo -c "\pset footer off" -c "SELECT r.outcome FROM idem_claim('shop', 'pay-7f3a', '{\"amount\": 9999, \"currency\": \"EUR\"}'::jsonb) AS r"
echo "   -> mismatch: answer 422; nothing is charged and the stored answer is not revealed."

say "5. The dead inverter: a worker claims a key, then the power dies before it can finish"
# The worker's own session claims (committed: two-step mode), charges, records that as a checkpoint, then
# hangs before it can finish...
psql_demo -At >/dev/null 2>&1 <<'SQL' &
SELECT r.token AS token FROM idem_claim('shop', 'pay-9c1d', '{"amount": 500, "currency": "EUR"}'::jsonb, lease => '2 seconds') AS r \gset
SELECT idem_checkpoint('shop', 'pay-9c1d', :token, 'charged', '{"charge": "ch_2"}');
SELECT pg_sleep(60) /* calling the provider */;
SQL
until worker_pid=$(psql_demo -At -c "SELECT pid FROM pg_stat_activity WHERE query LIKE '%calling the provider%' AND pid <> pg_backend_pid()") \
      && [ -n "$worker_pid" ]; do sleep 0.1; done
# ...and dies: SIGKILL, no goodbye, no finish.
kill -9 "$worker_pid"
wait || true
echo "   worker claimed with a 2 s lease, charged ch_2, checkpointed 'charged', then hung"
echo "   worker backend $worker_pid killed with SIGKILL (the server restarts its sessions and carries on)"
until psql_demo -At -c "SELECT 1" >/dev/null 2>&1; do sleep 0.2; done
psql_demo -At -c "SELECT 'retry right away -> ' || r.outcome || ', retry_after ' || r.retry_after || ' s'
  FROM idem_claim('shop', 'pay-9c1d', '{\"amount\": 500, \"currency\": \"EUR\"}'::jsonb) AS r"
sleep 2.2
psql_demo -c "\pset footer off" -c "SELECT scope, key, token, attempt FROM idem_stale()"
echo "   (idem_stale lists the key whose lease ended: what a reconciler works through)"
psql_demo <<'SQL'
SELECT r.outcome, r.attempt, r.token AS new_token, r.checkpoint, r.checkpoint_state
  FROM idem_claim('shop', 'pay-9c1d', '{"amount": 500, "currency": "EUR"}'::jsonb) AS r \gset
\echo '   retry after the lease -> ' :outcome ', attempt ' :attempt ', new token ' :new_token ', checkpoint ' :checkpoint :checkpoint_state
\echo '   the new owner resumes after "charged" (and confirms ch_2 at the provider by the key): no second charge, it finishes'
SELECT idem_finish('shop', 'pay-9c1d', :new_token, 201, '{"charge": "ch_2", "reconciled": true}'::jsonb) \gset
SELECT 'and the next retry -> ' || r.outcome || ' ' || r.status_code || ' ' || r.response AS "step"
  FROM idem_claim('shop', 'pay-9c1d', '{"amount": 500, "currency": "EUR"}'::jsonb) AS r \gset
\echo '  ' :step
SQL

say "6. Cleanup: answers are kept for idem_keys.retention (24 h); expired ones are swept in committed batches"
psql_demo <<'SQL'
SELECT r.token AS t FROM idem_claim('shop', 'pay-old', '{}'::jsonb) AS r \gset
SELECT idem_finish('shop', 'pay-old', :t, 200, '{}'::jsonb, retention => '1 second') \gset
SELECT pg_sleep(1.1) \gset
CALL idem_sweep_paced() \gset
\echo '   CALL idem_sweep_paced() (the pg_cron way: a commit per batch) deleted' :removed 'expired key(s). What is left:'
\pset footer off
SELECT in_progress, stale, finished, expired, pg_size_pretty(table_bytes) AS size FROM idem_stats();
SQL

cat <<TXT

The demo server keeps running. Connect with:
    psql -h $dir -p $port -U postgres
Stop it with:
    make stop
TXT
