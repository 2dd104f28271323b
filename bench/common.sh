# Shared by the bench scripts (sourced): the pgbench binary, the payloads every contender sends, a
# throwaway server with the bench schema, and filling it with expired keys.
# shellcheck shell=bash disable=SC2034
PGBENCH=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --bindir)/pgbench

# A typical payment request, the same request with another amount, and a ~200-byte answer.
BODY='{"amount": 1000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}'
BODY2='{"amount": 2000, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3", "description": "Order 4711"}'
# BENCH_BODY_BYTES=N: requests of N bytes instead (N above the typical one's), their description padded: an
# order with many lines, a batch endpoint. Both requests grow alike, so a mismatch is still one digit apart.
if [ -n "${BENCH_BODY_BYTES:-}" ] && ((BENCH_BODY_BYTES > ${#BODY})); then
  body_pad=$(printf '%*s' $((BENCH_BODY_BYTES - ${#BODY})) '' | tr ' ' 'x')
  BODY=${BODY/Order 4711/Order 4711$body_pad}
  BODY2=${BODY2/Order 4711/Order 4711$body_pad}
fi
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

# row_select pk|hash [req]: PostgreSQL's own read of a finished key's row, a prepared SELECT of its status:
# pk by the primary key (what a user writes), hash through the hash index a replay probes
# (idem_keys_key_hash_idx on scope || key; equal keys with equal concatenations have equal scopes, so it
# finds the same row). req adds the request the way a replay is given it, a jsonb parameter parsed at Bind,
# in the target list (in WHERE it would be a one-time filter: a plan node a replay does not have). No
# function, no fingerprint: what reading the row costs PostgreSQL itself (docs/benchmarks.md).
row_select() {
  local cols='k.status_code' where='k.scope = :scope AND k.key = :key::text'
  [ "$1" = hash ] && where='k.scope || k.key = :scope || :key::text AND k.key = :key::text'
  [ "${2:-}" = req ] && cols+=', :req::jsonb IS NULL AS no_req'
  echo "SELECT $cols FROM public.idem_keys k WHERE $where"
}
# row_check LABEL: after a row_select's \gset (no row is an error there), aborts the client unless the row's
# status is the bench's 201.
row_check() {
  printf '\\if :status_code != 201\n\\shell echo bench: %s: status :status_code 1>&2\n\\set abort 1/0\n\\endif\n' "$1"
}

# read_script WHAT N FILE: a pgbench script over keys 1..N (a number, or a pgbench variable such as :nkeys)
# of scope :scope, as the round-trip floor measures. WHAT: replay, the outcome of idem_claim with :req (a replay of a
# finished key); lookup, of idem_lookup; floor, SELECT 1; args, a replay's arguments alone (the same
# parameters and the request's JSON parse, no call); select, select_req, select_hash, select_hash_req:
# row_select by primary key or hash index, without or with the request (lookup's and replay's references).
read_script() {
  local call
  case $1 in
    replay) call='SELECT (idem_claim(:scope, :key::text, :req::jsonb)).outcome;' ;;
    lookup) call='SELECT (idem_lookup(:scope, :key::text)).outcome;' ;;
    floor) call='SELECT 1;' ;;
    args) call='SELECT pg_catalog.jsonb_typeof(:req::jsonb), :scope::text, :key::text;' ;;
    select | select_req | select_hash | select_hash_req)
      local how=pk req=
      [[ $1 == select_hash* ]] && how=hash
      [[ $1 == *_req ]] && req=req
      call="$(row_select $how $req) \\gset"$'\n'"$(row_check "$1")" ;;
    *) echo "read_script: replay, lookup, floor, args, select, select_req, select_hash or select_hash_req, not '$1'" >&2
      return 2 ;;
  esac
  printf '%s\n%s\n' "\\set key random(1, $2)" "$call" >"$3"
}

# pgbench_tps HOST PORT CLIENTS DATABASE PGBENCH_ARG...: one pgbench run as the hop benchmarks make it (prepared
# statements, synchronous_commit off in its sessions, up to 2 threads); prints its tps, or its whole output and
# fails when a transaction failed.
pgbench_tps() {
  local host=$1 port=$2 clients=$3 db=$4 out
  shift 4
  out=$(PGOPTIONS="-c synchronous_commit=off" "$PGBENCH" -n -M prepared -h "$host" -p "$port" -U postgres \
    -c "$clients" -j $((clients < 2 ? clients : 2)) "$@" "$db" 2>&1)
  grep -q '^number of failed transactions: 0 ' <<<"$out" || { echo "$out" >&2; return 1; }
  sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out"
}
