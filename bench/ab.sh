#!/usr/bin/env bash
# A/B of two variants of one workload on one throwaway PostgreSQL 15: pairs of pgbench runs in alternating
# order (A B, B A, …), so neither side always runs first. Prints each run and the median and mean of the
# per-pair ratios A ÷ B. For gaps too small for the full bench's three rounds.
#   bash bench/ab.sh                      idem_keys vs hand-written SQL, 1 client, 10 pairs of 4 s
# Knobs (environment):
#   AB_WORKLOAD                newkey (default): claim + finish of a new key, by contender;
#                              replay: `SELECT (idem_claim(…)).outcome` of one of 100,000 finished keys (the
#                              round-trip floor's form), lookup: the same with idem_lookup
#   AB_A, AB_B                 contenders: for newkey sql, plpgsql or idem (default idem, sql); for replay and
#                              lookup idem or floor (`SELECT 1`; default idem, floor), or args: a replay's
#                              parameters and the request's JSON parse without the call (what the caller's
#                              side of a replay costs the server); select, select_req, select_hash,
#                              select_hash_req: PostgreSQL's own SELECT of the row (bench/common.sh
#                              row_select), by primary key or hash index, without or with the request
#   AB_A_OPTIONS, AB_B_OPTIONS extra PGOPTIONS for each side, e.g. "-c idem_keys.direct_path=off"
#   AB_A_SQL, AB_B_SQL         SQL run as the superuser before each run of that side (e.g. an ALTER FUNCTION)
#   AB_A_LIB, AB_B_LIB         a library installed as $libdir/idem_keys.so before each run of that side (removed
#                              first, so a backend still mapping the other is not overwritten in place); each
#                              run's new connections load it. E.g. the previous release's, from its tarball.
#                              The installed library is put back at the end.
#   AB_USER                    the role pgbench connects as (default postgres); any other is created as a plain
#                              LOGIN role, so what binds ordinary callers binds it. Tenant binding's A/B: the
#                              role named as the workload's scope (new, or fin for replay and lookup), with
#                              AB_B_SQL="ALTER ROLE fin SET idem_keys.tenant_binding = 'role'" and AB_A_SQL
#                              resetting it (docs/benchmarks.md, Tenant binding)
#   AB_CLIENTS (1), AB_PAIRS (10), AB_SECONDS (4), AB_SYNC (off)
# Needs the extension installed (make install).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKLOAD=${AB_WORKLOAD:-newkey}
READ_CONTENDERS="floor args select select_req select_hash select_hash_req" # read_script's, besides idem's
A=${AB_A:-idem}
case $WORKLOAD in
  newkey) B=${AB_B:-sql} allowed=" sql plpgsql idem " ;;
  replay | lookup) B=${AB_B:-floor} allowed=" idem $READ_CONTENDERS " ;;
  *) echo "AB_WORKLOAD: newkey, replay or lookup" >&2; exit 2 ;;
esac
for c in "$A" "$B"; do
  [[ "$allowed" == *" $c "* ]] || { echo "ab.sh: AB_WORKLOAD=$WORKLOAD takes contenders${allowed% }; not $c" >&2; exit 2; }
done
CLIENTS=${AB_CLIENTS:-1} PAIRS=${AB_PAIRS:-10} SECS=${AB_SECONDS:-4} SYNC=${AB_SYNC:-off}
source bench/common.sh

libdir=$("${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" --pkglibdir)
if [ -n "${AB_A_LIB:-}${AB_B_LIB:-}" ]; then
  installed=$(mktemp -d)/installed.so
  cp "$libdir/idem_keys.so" "$installed"
fi
use_lib() { # use_lib FILE: installs FILE as the library new backends load
  rm -f "$libdir/idem_keys.so"
  cp "$1" "$libdir/idem_keys.so"
}
start_server ab "${AB_PORT:-25442}" "shared_buffers = 1GB"
[ -z "${installed:-}" ] ||
  trap 'use_lib "$installed"; rm -rf "$(dirname "$installed")"; bash scripts/cluster.sh stop "$dir"; rm -rf "$dir"' EXIT
scope=new
case $WORKLOAD in
  newkey)
    for c in "$A" "$B"; do
      { echo '\set key random(1, 9000000000000000000)'; cat "bench/scripts/$c/claim.pgbench" "bench/scripts/$c/finish.pgbench"; } \
        >"$dir/$c.pgbench"
    done
    ;;
  replay | lookup)
    scope=fin
    fill_finished 100000
    read_script "$WORKLOAD" 100000 "$dir/idem.pgbench"
    for c in $READ_CONTENDERS; do read_script "$c" 100000 "$dir/$c.pgbench"; done
    ;;
esac

BENCH_USER=${AB_USER:-postgres}
[ "$BENCH_USER" = postgres ] || sql -v u="$BENCH_USER" <<<'CREATE ROLE :"u" LOGIN;'

# run SIDE CONTENDER OPTIONS SETUP_SQL [LIBRARY]: one run, printed as "SIDE tps"
run() {
  local out
  [ -z "${5:-}" ] || use_lib "$5"
  [ -z "$4" ] || sql -c "$4" >/dev/null
  out=$(PGOPTIONS="-c synchronous_commit=$SYNC $3" "$PGBENCH" -n -M prepared -h "$dir" -p "$PORT" -U "$BENCH_USER" \
    -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" -f "$dir/$2.pgbench" -D scope=$scope -D req="$BODY" -D resp="$RESP" \
    -D hdrs="$HDRS" postgres 2>&1) || { echo "$out" >&2; exit 1; }
  grep -q '^number of failed transactions: 0 ' <<<"$out" || { echo "$out" >&2; exit 1; }
  echo "$1 $(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")"
}
echo "=== A/B: A = $A ${AB_A_OPTIONS:-} ${AB_A_SQL:+(after: $AB_A_SQL)}; B = $B ${AB_B_OPTIONS:-} ${AB_B_SQL:+(after: $AB_B_SQL)}"
echo "=== $WORKLOAD as $BENCH_USER, $CLIENTS client(s), synchronous_commit = $SYNC, $PAIRS pairs of $SECS s runs"
for ((p = 1; p <= PAIRS; p++)); do
  if ((p % 2)); then
    run A "$A" "${AB_A_OPTIONS:-}" "${AB_A_SQL:-}" "${AB_A_LIB:-}"; run B "$B" "${AB_B_OPTIONS:-}" "${AB_B_SQL:-}" "${AB_B_LIB:-}"
  else
    run B "$B" "${AB_B_OPTIONS:-}" "${AB_B_SQL:-}" "${AB_B_LIB:-}"; run A "$A" "${AB_A_OPTIONS:-}" "${AB_A_SQL:-}" "${AB_A_LIB:-}"
  fi
done | tee "$dir/runs"
python3 - "$dir/runs" <<'PY'
import statistics, sys
runs = {"A": [], "B": []}
for line in open(sys.argv[1]):
    side, tps = line.split()
    runs[side].append(float(tps))
pairs = [a / b for a, b in zip(runs["A"], runs["B"])]
print(f"=== A median {statistics.median(runs['A']):.0f} tps, B median {statistics.median(runs['B']):.0f} tps; "
      f"A / B per pair: median {statistics.median(pairs):.3f}, mean {statistics.mean(pairs):.3f}, "
      f"min {min(pairs):.3f}, max {max(pairs):.3f}")
PY
