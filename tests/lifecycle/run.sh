#!/usr/bin/env bash
# A real extension's lifecycle (make test, stage `lifecycle`): pg_dump/pg_restore and a plain-SQL dump into
# fresh databases; a streaming hot standby (reads work, writes get 25006, the sweeper idles) and its
# promotion after the primary dies. Needs the extension installed.
set -euo pipefail
cd "$(dirname "$0")"
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
base=$(mktemp -d /tmp/idem-life.XXXXXX); chown postgres: "$base"
primary=$base/primary standby=$base/standby pport=25357 sport=25358
trap 'bash ../../scripts/cluster.sh stop "$standby"; bash ../../scripts/cluster.sh stop "$primary"; rm -rf "$base"' EXIT
suite=lifecycle; source ../lib.sh
p() { sql_at "$primary" "$pport" "$@"; }
s() { sql_at "$standby" "$sport" "$@"; }
wait_for() { poll "$@"; }
rows() { $1 -d "$2" -c "SELECT k::text FROM idem_keys k ORDER BY scope, key"; }

bash ../../scripts/cluster.sh start "$primary" "$pport" "shared_preload_libraries = 'idem_keys'"
p -c 'CREATE DATABASE src' >/dev/null
p -d src -c 'CREATE EXTENSION idem_keys' -f keys.sql >/dev/null
max_token=$(p -d src -c "SELECT last_value FROM idem_keys_token_seq")

echo "--- pg_dump / pg_restore, and a plain-SQL dump"
sudo -u postgres "$bin/pg_dump" -h "$primary" -p "$pport" -U postgres -Fc -f "$base/src.dump" src
sudo -u postgres "$bin/pg_dump" -h "$primary" -p "$pport" -U postgres -f "$base/src.sql" src
p -c 'CREATE DATABASE from_custom' -c 'CREATE DATABASE from_plain' >/dev/null
sudo -u postgres "$bin/pg_restore" -h "$primary" -p "$pport" -U postgres --exit-on-error -d from_custom "$base/src.dump"
p -d from_plain -f "$base/src.sql" >/dev/null
for db in from_custom from_plain; do
  [ "$(p -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'")" = "$(p -d src -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'")" ] \
    || fail "$db: the extension was not recreated"
  [ "$(rows p "$db")" = "$(rows p src)" ] || fail "$db: the keys differ from the source"
  [ "$(p -d "$db" -c "SELECT last_value FROM idem_keys_token_seq")" = "$max_token" ] || fail "$db: token sequence not restored"
  PGOPTIONS="-c life.max_token=$max_token" p -d "$db" -f behaves.sql
  echo "$db: extension recreated, $(p -d "$db" -c "SELECT count(*) FROM idem_keys WHERE scope = 'life'") keys restored row for row, token sequence at $max_token, claims behave as before"
done

echo "--- streaming hot standby"
p -d src -c "SELECT idem_finish('life', 'on-primary', (idem_claim('life', 'on-primary', '{}'::jsonb)).token, 200, '{}'::jsonb)" >/dev/null
mkdir -p "$standby"; chown postgres: "$standby"
sudo -u postgres "$bin/pg_basebackup" -h "$primary" -p "$pport" -U postgres -D "$standby/data" -R -X stream --checkpoint=fast
# The copy carries the primary's port and socket directory: point them at the standby's own.
printf "port = %s\nunix_socket_directories = '%s'\n" "$sport" "$standby" | sudo -u postgres tee -a "$standby/data/postgresql.conf" >/dev/null
bash ../../scripts/cluster.sh start "$standby" "$sport"
wait_for s "SELECT pg_is_in_recovery()" 30
p -d src -c "SELECT idem_claim('life', 'after-backup', '{}'::jsonb)" >/dev/null
lsn=$(p -c "SELECT pg_current_wal_lsn()")
wait_for s "SELECT pg_last_wal_replay_lsn() >= '$lsn'" 30
[ "$(rows s src)" = "$(rows p src)" ] || fail "the standby's keys differ from the primary's"
[ "$(s -d src -c "SELECT (idem_lookup('life', 'json')).response::text")" = '{"charge": "ch_1"}' ] || fail "idem_lookup on the standby"
[ "$(s -d src -c "SELECT (idem_lookup('life', 'after-backup')).outcome")" = in_progress ] || fail "streamed claim not visible"
s -d src -c "SELECT in_progress, finished FROM idem_stats()" >/dev/null || fail "idem_stats on the standby"
for call in "SELECT idem_claim('life', 'x', '{}'::jsonb)" "SELECT idem_finish('life', 'live', 1, 200, NULL::jsonb)" \
            "SELECT idem_checkpoint('life', 'live', 1, 'p')" "SELECT idem_release('life', 'live', 1)" "SELECT idem_sweep()"; do
  out=$(psql -X -h "$standby" -p "$sport" -U postgres -d src -v VERBOSITY=verbose -c "$call" 2>&1 || true)
  grep -q 'ERROR:  25006' <<<"$out" && grep -q 'HINT:  Send .* to the primary' <<<"$out" \
    || fail "on the standby, '$call' did not fail with 25006 and the hint: $out"
done
[ "$(s -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'idem_keys%'")" = 0 ] \
  || fail "the sweeper runs on the standby"
echo "standby: keys streamed, idem_lookup and idem_stats work, every write gets 25006 with a hint, no sweeper runs"

echo "--- the primary dies; the standby is promoted"
bash ../../scripts/cluster.sh immediate "$primary"
sudo -u postgres "$bin/pg_ctl" -D "$standby/data" -w promote >/dev/null
wait_for s "SELECT NOT pg_is_in_recovery()" 30
PGOPTIONS="-c life.max_token=$max_token" s -d src -f behaves.sql
[ "$(s -d src -c "SELECT (idem_claim('life', 'on-primary', '{}'::jsonb)).outcome")" = replay ] || fail "finished key lost in failover"
[ "$(s -d src -c "SELECT (idem_lookup('life', 'after-backup')).outcome")" = in_progress ] || fail "in-progress key lost in failover"
wait_for s "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'idem_keys launcher'" 30
echo "promoted: every finished and in-progress key is there, claims work, the launcher started"
echo "lifecycle: ok"
