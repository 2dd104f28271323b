# Shared by the bench scripts (sourced): the pgbench binary, the payloads every contender sends, a
# throwaway server with the bench schema, and filling it with expired keys.
# shellcheck shell=bash disable=SC2034
PGBENCH=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --bindir)/pgbench

# A typical payment request, the same request with another amount, and a ~200-byte answer.
BODY='{"amount": 1000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}'
BODY2='{"amount": 2000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}'
RESP='{"id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "object": "charge", "amount": 1000, "currency": "eur", "paid": true, "status": "succeeded", "receipt_url": "https://pay.example.com/receipts/acct_1/ch_3MmlLrLkdIwHu7ix0snN0B15"}'
HDRS='{"Location": "/v1/charges/ch_3MmlLrLkdIwHu7ix0snN0B15"}'

# start_server TAG PORT [postgresql.conf line ...]: a throwaway server in $dir (removed on exit) with the
# bench schema loaded, and sql() to talk to it. Later lines override the defaults here.
start_server() {
  local tag=$1
  PORT=$2
  shift 2
  dir=$(mktemp -d "/tmp/idem-$tag.XXXXXX") # short: it holds the server's Unix socket
  trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
  bash scripts/cluster.sh start "$dir" "$PORT" "shared_buffers = 2GB" "max_wal_size = 8GB" \
    "checkpoint_timeout = 30min" "log_min_messages = warning" "$@"
  sql -f bench/schema.sql >/dev/null
}
sql() { psql -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$PORT" -U postgres "$@"; }

# fill_expired N: N finished keys of scope 'expired' in idem_keys whose retention ended, ready for a sweep.
fill_expired() {
  sql -v n="$1" -v req="$BODY" -v resp="$RESP" -v hdrs="$HDRS" <<'SQL'
CALL bench.populate('public.idem_keys', 'expired', 'expired', 1, :n, :'req', :'resp', :'hdrs');
SQL
}

# fill_finished N: N finished keys of scope 'fin' (keys 1..N), each holding the bench's answer: what a
# retry replays.
fill_finished() {
  sql -v n="$1" -v req="$BODY" -v resp="$RESP" -v hdrs="$HDRS" <<'SQL'
CALL bench.populate('public.idem_keys', 'finished', 'fin', 1, :n, :'req', :'resp', :'hdrs');
VACUUM ANALYZE public.idem_keys;
SQL
}

# The least SQL can do to read a finished key: a prepared SELECT of its status by primary key, and the same
# given the request as a replay is (a jsonb parameter, parsed at Bind). No function, no fingerprint, one
# column: what PostgreSQL itself costs for reading the row, which a replay's and a lookup's floor ratios are
# held against (docs/benchmarks.md).
ROW_SELECT='SELECT k.status_code FROM public.idem_keys k WHERE k.scope = :scope AND k.key = :key::text'
ROW_SELECT_REQ="$ROW_SELECT AND :req::jsonb IS NOT NULL"
# The same read through the hash index a replay probes (idem_keys_key_hash_idx, on scope || key): equal keys
# with equal concatenations have equal scopes, so this finds the same row.
ROW_SELECT_HASH_REQ='SELECT k.status_code FROM public.idem_keys k WHERE k.scope || k.key = :scope || :key::text'
ROW_SELECT_HASH_REQ+=' AND k.key = :key::text AND :req::jsonb IS NOT NULL'

# read_script replay|lookup|floor|args|select|select_req|select_hash N FILE: a pgbench script over keys 1..N
# of scope :scope, as issue 19 measures: the outcome of idem_claim with :req (a replay of a finished key), of
# idem_lookup, or SELECT 1; args is a replay's arguments alone (the same parameters and the request's JSON
# parse, no call); select is the least SQL can do to read a finished key, a prepared SELECT of its status by
# primary key (lookup's baseline), select_req the same with the request's parse (a replay's), select_hash
# select_req through the hash index.
read_script() {
  local call
  case $1 in
    replay) call='SELECT (idem_claim(:scope, :key::text, :req::jsonb)).outcome;' ;;
    lookup) call='SELECT (idem_lookup(:scope, :key::text)).outcome;' ;;
    floor) call='SELECT 1;' ;;
    args) call='SELECT pg_catalog.jsonb_typeof(:req::jsonb), :scope::text, :key::text;' ;;
    select) call="$ROW_SELECT;" ;;
    select_req) call="$ROW_SELECT_REQ;" ;;
    select_hash) call="$ROW_SELECT_HASH_REQ;" ;;
    *) echo "read_script: replay, lookup, floor, args, select, select_req or select_hash, not '$1'" >&2; return 2 ;;
  esac
  printf '%s\n%s\n' "\\set key random(1, $2)" "$call" >"$3"
}
