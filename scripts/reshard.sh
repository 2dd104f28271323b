#!/usr/bin/env bash
# reshard.sh: doubles the partitions of an idem_keys_proxy router, N -> 2N (2 -> 4, say), with no key lost,
# none on two partitions, and tokens that still fence (docs/scale-out.md, "Resharding").
#
#   scripts/reshard.sh ROUTER ADMIN_0 … ADMIN_2N-1 -- NEW_N … NEW_2N-1
#     ROUTER    a conninfo/URL of the router's database, as the extension's owner
#     ADMIN_i   a superuser conninfo/URL of partition i's database, for every partition, old and new
#     NEW_i     what the router's server gets as option p<i> for each new partition (libpq conninfo, as the
#               existing p0 … options are)
#   RESHARD_ROLE  the role the router logs in as on the partitions (default idem_router)
#
# PL/Proxy keeps hash & (partitions - 1), so with twice the partitions a key of partition p stays on p or
# moves to p + N: each new partition is filled from one old one. Writes pause, as failed calls that clients
# retry (08006 through the router), from step 1 to step 5; the script prints for how long:
#   1. the router's role may no longer log in to the old partitions, and its sessions there end;
#   2. the moving keys are copied to their new partitions (emptied before the pause: the router does not
#      read them yet); 1 to 3 run for all old partitions at once;
#   3. each new partition's token sequence is set past its source's, so a token from before the move never
#      owns a key claimed after it;
#   4. the router's server lists the new partitions: routing switches;
#   5. the moved keys leave the old partitions; the role may log in again.
# A run that fails before step 4 changed nothing the router reads, and lets writes resume: run it again.
# After step 4, run it again with the same arguments: it sees 2N partitions and does step 5 only.
# Connection strings here and in the server's options are visible (ps, pg_foreign_server): no password= in
# them; use a passfile or a service file.
set -euo pipefail
role=${RESHARD_ROLE:-idem_router}
router=$1; shift
admins=()
while (($#)) && [ "$1" != -- ]; do admins+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "usage: $0 ROUTER ADMIN_0 … ADMIN_2N-1 -- NEW_N … NEW_2N-1" >&2; exit 2; }
shift
news=("$@")
total=${#admins[@]} n=${#news[@]}
((n > 0 && total == 2 * n)) || { echo "reshard: give 2N partition admins and N new partitions (got $total and $n)" >&2; exit 2; }
sql() { local url=$1; shift; psql -X -q -At -v ON_ERROR_STOP=1 "$@" "$url"; }
since() { echo "$((($(date +%s%N) - paused_at) / 1000000)) ms"; }
# The partition of (scope, key) among $total, as idem_keys_proxy.route computes it: the same expression,
# evaluated on the partition itself.
moving="(pg_catalog.hashtext(pg_catalog.length(scope)::text || ':' || scope || key)::bigint & (:'total' - 1)) = :'target'"

have=$(sql "$router" -c "SELECT idem_keys_proxy.partitions()")
if [ "$have" != "$total" ]; then
  [ "$have" = "$n" ] || { echo "reshard: the router has $have partitions, not $n" >&2; exit 1; }
  version=$(sql "$router" -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys_proxy'")
  for ((i = n; i < total; i++)); do
    got=$(sql "${admins[$i]}" -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'")
    [ "$got" = "$version" ] || { echo "reshard: new partition $i runs idem_keys '$got', the router $version" >&2; exit 1; }
  done
  # The new partitions are not read by the router yet: empty them before the pause, not during it.
  for ((i = n; i < total; i++)); do sql "${admins[$i]}" -c "TRUNCATE idem_keys"; done
  paused_at=$(date +%s%N)
  # However the run ends, writes resume: before the switch the old partitions still hold every key (the copies
  # are ignored, and emptied by the next run); after it the router reads the new layout.
  resume() {
    local i
    for ((i = 0; i < n; i++)); do sql "${admins[$i]}" -v role="$role" <<<"ALTER ROLE :\"role\" LOGIN;" >/dev/null || true; done
  }
  trap resume EXIT
  # 1. to 3., for each old partition and its new one, all pairs at once: only partition i holds the keys that
  #    move to i + N, so pausing i is enough to move them.
  move() {
    local i=$1 target=$(($1 + n)) left last expected copied
    # 1. Pause: no new sessions of the router's role, and the open ones end (an interrupted call rolls back;
    #    its client retries). pg_terminate_backend(pid, 5000) returns once the session is gone, or after
    #    5 s; a session still there then stops the run.
    left=$(sql "${admins[$i]}" -v role="$role" <<'SQL'
ALTER ROLE :"role" NOLOGIN;
-- A session that ends by itself between the look and the signal needs no warning.
SET client_min_messages = error;
SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = :'role' \g /dev/null
-- Again: a session that authenticated just before NOLOGIN may have registered after the first look.
SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = :'role' \g /dev/null
-- A new statement, a new view of the sessions: none may be left.
SELECT count(*) FROM pg_stat_activity WHERE usename = :'role';
SQL
)
    [ "$left" = 0 ] || { echo "reshard: $left sessions of $role on partition $i did not end" >&2; return 1; }
    echo "reshard: partition $i paused ($(since))"
    # 2. Copy the moving keys; 3. carry the token sequence over, so a token from before never owns a key
    #    claimed after; then check the count.
    sql "${admins[$i]}" -v total="$total" -v target="$target" <<<"COPY (SELECT * FROM idem_keys WHERE $moving) TO STDOUT;" \
      | sql "${admins[$target]}" -c "COPY idem_keys FROM STDIN"
    read -r last expected < <(sql "${admins[$i]}" -F ' ' -v total="$total" -v target="$target" \
      <<<"SELECT (SELECT last_value FROM idem_keys_token_seq), (SELECT count(*) FROM idem_keys WHERE $moving);")
    copied=$(sql "${admins[$target]}" -v last="$last" <<'SQL'
SELECT setval('idem_keys_token_seq', greatest(:'last'::bigint, (SELECT last_value FROM idem_keys_token_seq))) \g /dev/null
SELECT count(*) FROM idem_keys;
SQL
)
    [ "$copied" = "$expected" ] || { echo "reshard: partition $target got $copied keys of $expected" >&2; return 1; }
    echo "reshard: $copied keys of partition $i copied to partition $target ($(since))"
  }
  pids=()
  for ((i = 0; i < n; i++)); do move "$i" & pids+=($!); done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  ((failed == 0)) || { echo "reshard: a move failed; nothing is switched, writes resume: run it again" >&2; exit 1; }
  # 4. Switch: one ALTER SERVER adds them all (PL/Proxy's validator refuses a count that is not a power of
  #    two). The conninfos are bound as psql variables and quoted by format().
  vars=() refs=()
  for ((i = 0; i < n; i++)); do vars+=(-v "new$i=${news[$i]}"); refs+=(":'new$i'"); done
  sql "$router" "${vars[@]}" -v first="$n" <<SQL
SELECT format('ALTER SERVER idem_keys_cluster OPTIONS (%s)',
              string_agg(format('ADD %I %L', 'p' || (:'first'::int + o.i - 1), o.conninfo), ', ' ORDER BY o.i))
  FROM unnest(ARRAY[$(IFS=,; echo "${refs[*]}")]::text[]) WITH ORDINALITY AS o(conninfo, i) \gexec
SQL
else
  echo "reshard: the router already lists $total partitions: finishing step 5"
  paused_at=$(date +%s%N)
fi
# 5. Clean up and resume.
for ((i = 0; i < n; i++)); do
  removed=$(sql "${admins[$i]}" -v total="$total" -v target=$((i + n)) <<<"WITH gone AS (DELETE FROM idem_keys WHERE $moving RETURNING 1) SELECT count(*) FROM gone;")
  echo "reshard: $removed moved keys removed from partition $i ($(since))"
  sql "${admins[$i]}" -v role="$role" <<<"ALTER ROLE :\"role\" LOGIN;" >/dev/null
done
echo "reshard: $n -> $total partitions; writes paused for $((($(date +%s%N) - paused_at) / 1000000)) ms"
