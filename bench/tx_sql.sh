#!/usr/bin/env bash
# What the transactional mode's SQL costs a new key, without HTTP: pgbench runs, side by side on one throwaway
# PostgreSQL with the extension, what each variant of the HTTP benchmark's sample app sends for one new payment,
# and prints each one's rate and its ratio to the bare app's single INSERT. No middleware can beat its own SQL:
# this is the ceiling of bench/http.sh's ratios on the same machine (docs/benchmarks.md, HTTP middlewares).
#   bare     the app without idempotency: INSERT … RETURNING, autocommit (one round trip, one commit)
#   tx       the transactional mode: BEGIN; idem_claim; the INSERT; idem_finish; COMMIT (five, one commit); the
#            key's row written once (idem_keys.write_once, the default)
#   piped    the same, BEGIN sent with the claim and the finish with COMMIT in one pipeline each (three round
#            trips, as a driver's pipeline sends them). pgbench cannot \gset inside a pipeline, so the finish
#            names the claim's token as currval of the token sequence: the same token, the same work.
#   twice    tx with idem_keys.write_once = off: the claim inserts the row and the finish updates it
#   default  the default mode: idem_claim; the INSERT; idem_finish, each autocommit (three, three commits)
#   begin    BEGIN; the INSERT; COMMIT: what the two extra round trips alone cost
#   bash bench/tx_sql.sh     Knobs: TX_SQL_SYNC ("on off"), TX_SQL_CLIENTS ("1 8"), TX_SQL_ROUNDS (3),
#                            TX_SQL_SECONDS (5), TX_SQL_PORT (25670). Needs the extension installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
rounds=${TX_SQL_ROUNDS:-3} seconds=${TX_SQL_SECONDS:-5}
start_server tx-sql "${TX_SQL_PORT:-25670}"
sql -d postgres -c "CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text NOT NULL, idempotency_key text,
  amount bigint NOT NULL, currency text NOT NULL, customer_id text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
scripts=$(mktemp -d /tmp/idem-tx-sql.XXXXXX)
trap 'bash scripts/cluster.sh stop "$dir"; rm -rf "$dir" "$scripts"' EXIT
k="(:client_id::text || '-' || :n::text)"
# The sample app's statements (tests/http/apps), with the load generator's body and a ~100-byte answer. Keys are
# random per client, so every call is a new key.
insert="INSERT INTO payments (tenant, idempotency_key, amount, currency, customer_id)
  VALUES ('bench', $k, 1000, 'EUR', 'cus_bench') RETURNING *;"
claim="SELECT (r).outcome, (r).token FROM (SELECT idem_claim('bench', $k,
  '{\"amount\": 1000, \"currency\": \"EUR\", \"customer_id\": \"cus_bench\"}'::jsonb) r) s \\gset"
finish="SELECT idem_finish('bench', $k, :token, 201, '{\"id\": 1, \"tenant\": \"bench\", \"amount\": 1000,
  \"currency\": \"EUR\", \"customer_id\": \"cus_bench\", \"attempt\": \"claimed\"}'::jsonb,
  headers => '{\"Location\": \"/payments/1\"}'::jsonb);"
key='\set n random(1, 1000000000000)'
printf '%s\n%s\n' "$key" "$insert" >"$scripts/bare.sql"
printf '%s\nBEGIN;\n%s\n%s\n%s\nCOMMIT;\n' "$key" "$claim" "$insert" "$finish" >"$scripts/tx.sql"
printf '%s\n%s\n%s\n%s\n' "$key" "$claim" "$insert" "$finish" >"$scripts/default.sql"
cp "$scripts/tx.sql" "$scripts/twice.sql"
piped_finish=${finish/:token/currval(\'idem_keys_token_seq\')}
printf '%s\n\\startpipeline\nBEGIN;\n%s;\n\\endpipeline\n%s\n\\startpipeline\n%s\nCOMMIT;\n\\endpipeline\n' \
  "$key" "${claim% \\gset}" "$insert" "$piped_finish" >"$scripts/piped.sql"
printf '%s\nBEGIN;\n%s\nCOMMIT;\n' "$key" "$insert" >"$scripts/begin.sql"
chmod -R a+rX "$scripts"
variants=(bare tx piped twice default begin)
declare -A options=([twice]='-c idem_keys.write_once=off')
echo "bench/tx_sql: PostgreSQL $(sql -d postgres -c 'SHOW server_version'), commit $(git rev-parse --short HEAD)," \
  "$(nproc) cores, ${rounds} rounds of ${seconds} s, the order turning every round"
echo "| synchronous_commit | clients | bare INSERT (tps) | transactional mode's SQL (tps) | ratio | the same, pipelined (tps) | ratio | the same, two writes (tps) | ratio | default mode's SQL (tps) | ratio | BEGIN, INSERT, COMMIT (tps) | ratio | pipelined ÷ BEGIN, INSERT, COMMIT |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for sync in ${TX_SQL_SYNC:-on off}; do
  for clients in ${TX_SQL_CLIENTS:-1 8}; do
    declare -A runs=()
    for ((r = 0; r < rounds; r++)); do
      for ((i = 0; i < ${#variants[@]}; i++)); do
        v=${variants[$(((i + r) % ${#variants[@]}))]}
        tps=$(PGOPTIONS="-c synchronous_commit=$sync ${options[$v]:-}" "$PGBENCH" -n -M prepared -c "$clients" -j "$clients" \
          -T "$seconds" -h "$dir" -p "$PORT" -U postgres -f "$scripts/$v.sql" postgres | sed -nE 's/^tps = ([0-9.]+).*/\1/p')
        runs[$v]+="$tps "
      done
    done
    python3 - "$sync" "$clients" "${runs[bare]}" "${runs[tx]}" "${runs[piped]}" "${runs[twice]}" "${runs[default]}" "${runs[begin]}" <<'PY'
import statistics, sys
sync, clients, *cells = sys.argv[1:]
med = [statistics.median(map(float, c.split())) for c in cells]
bare = med[0]
print(f"| {sync} | {clients} | {bare:,.0f} | " + " | ".join(f"{m:,.0f} | {m / bare:.2f}×" for m in med[1:])
      + f" | {med[2] / med[5]:.2f}× |")
PY
    unset runs
  done
done
