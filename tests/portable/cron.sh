#!/usr/bin/env bash
# pg_cron sweeps the portable edition (tests/portable/run.sh): the database's owner, not a superuser, schedules
# CALL idem_sweep_paced() as a managed service lets it, and the expired keys go, in more than one batch.
# Usage: cron.sh WORK PORT   (the server preloads pg_cron with cron.database_name = 'app')
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=portable
source tests/lib.sh
work=$1 port=$2
as() { local role=$1 db=$2; shift 2; psql -X -q -At -v ON_ERROR_STOP=1 -h "$work/pg" -p "$port" -U "$role" -d "$db" "$@"; }
as postgres app -c "CREATE EXTENSION IF NOT EXISTS pg_cron" -c "GRANT USAGE ON SCHEMA cron TO app_owner"
as app_owner app -c "DELETE FROM idem_keys" -c "
  INSERT INTO idem_keys (scope, key, fingerprint, token, attempt, created_at, claimed_at, lease_ends_at,
                         finished_at, expires_at, status_code)
  SELECT 'cron', 'k' || i, sha256(''), nextval('idem_keys_token_seq'), 1, now(), now(), now(), now(),
         now() - interval '1 minute', 200
    FROM generate_series(1, 350) AS i"
removed_before=$(as postgres app -c "SELECT coalesce(max(removed_since_start), 0) FROM idem_sweep_status()")
# Seconds where pg_cron has them (1.5 and later), else every minute.
schedule='* * * * *'
as postgres app -c "SELECT extversion >= '1.5' FROM pg_extension WHERE extname = 'pg_cron'" | grep -qx t && schedule='2 seconds'
t0=$SECONDS
as app_owner app -c "SELECT cron.schedule('idem-sweep', '$schedule', 'CALL idem_sweep_paced(batch_size => 100)')" >/dev/null
poll "as app_owner app" "SELECT EXISTS (SELECT FROM cron.job_run_details WHERE status = 'succeeded')
                           AND NOT EXISTS (SELECT FROM idem_keys WHERE scope = 'cron')" 80
as app_owner app -c "SELECT cron.unschedule('idem-sweep')" >/dev/null
removed=$(as postgres app -c "SELECT removed_since_start FROM idem_sweep_status()")
[ $((removed - removed_before)) = 350 ] ||
  fail "idem_sweep_status() counts $((removed - removed_before)) keys removed by pg_cron's sweep, not 350"
echo "pg_cron ('$schedule', as app_owner) swept the 350 expired keys (CALL idem_sweep_paced(batch_size => 100): a" \
     "commit per batch) $((SECONDS - t0)) s after scheduling; idem_sweep_status() counts them"
