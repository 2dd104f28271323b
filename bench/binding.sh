#!/usr/bin/env bash
# Tenant binding's cost (docs/benchmarks.md, Tenant binding): bench/ab.sh pairs, 8 clients, sync off, for a
# replay and a new key: binding on (role, then jwt with a Supabase-sized token) ÷ off, as a plain LOGIN role
# named as the workload's scope, so that it is bound; with PREV_LIB (the previous release's idem_keys.so,
# from its tarball) also this library ÷ that one with binding off, which is what an operator who never turns
# it on pays. Needs the extension installed (make install). AB_PAIRS (12).
set -euo pipefail
cd "$(dirname "$0")/.."
export AB_CLIENTS=8 AB_PAIRS=${AB_PAIRS:-12} AB_A=idem AB_B=idem
claims() { echo "{\"aud\": \"authenticated\", \"exp\": 1900000000, \"sub\": \"8d0f2f4e-4a51-4c2b-9a77-0c7a0e5b8f11\", \"email\": \"payments@example.com\", \"role\": \"authenticated\", \"app_metadata\": {\"provider\": \"email\", \"tenant_id\": \"$1\"}, \"user_metadata\": {}, \"session_id\": \"3b1f7c9e-2d4a-4e8b-9f60-1a2b3c4d5e6f\"}"; }
current=$(mktemp -d)/idem_keys.so
cp "$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --pkglibdir)/idem_keys.so" "$current"
trap 'rm -rf "$(dirname "$current")"' EXIT
for w in replay newkey; do
  u=$([ $w = replay ] && echo fin || echo new)
  if [ -n "${PREV_LIB:-}" ]; then
    echo "### $w: binding off, this library ÷ the previous one"
    AB_WORKLOAD=$w AB_A_LIB="$current" AB_B_LIB="$PREV_LIB" bash bench/ab.sh | tail -1
  fi
  echo "### $w: role binding on ÷ off"
  AB_WORKLOAD=$w AB_USER=$u AB_A_SQL="ALTER ROLE $u SET idem_keys.tenant_binding = 'role'" \
    AB_B_SQL="ALTER ROLE $u RESET idem_keys.tenant_binding" bash bench/ab.sh | tail -1
  echo "### $w: jwt binding on ÷ off"
  c=$(claims $u)
  AB_WORKLOAD=$w AB_USER=$u \
    AB_A_SQL="ALTER ROLE $u SET request.jwt.claims = '$c'; ALTER ROLE $u SET idem_keys.tenant_claim = 'app_metadata.tenant_id'; ALTER ROLE $u SET idem_keys.tenant_binding = 'jwt'" \
    AB_B_SQL="ALTER ROLE $u SET request.jwt.claims = '$c'; ALTER ROLE $u RESET idem_keys.tenant_binding" bash bench/ab.sh | tail -1
done
