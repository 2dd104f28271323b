#!/usr/bin/env bash
# Side-by-side benchmark of idem_keys against hand-written SQL and PL/pgSQL: one throwaway
# PostgreSQL of PG_CONFIG's major (bench/majors.sh runs it on each), pgbench -M prepared, the three contenders interleaved round by round in the same run.
#   bash bench/run.sh           full run (about 45 min on 2 cores, up to ~25 GB in /tmp, 8.6 GB of huge pages): writes docs/benchmarks.md, docs/bench/
#   bash bench/run.sh --smoke   ~1 s per run, tiny data, one round: every contender and workload runs, the
#                               three agree on semantics, and no run has an error; writes no docs
# Knobs (environment), e.g. a partial run that leaves docs/ alone:
#   BENCH_RESULTS=FILE (a copy of results.tsv), BENCH_CONTENDERS="idem" (a subset), BENCH_SHARED_BUFFERS=2GB, BENCH_HUGE_PAGES= (empty: 4 kB pages; see the
#   server below), BENCH_GROWTH_TOGETHER=1 (see growth), BENCH_FLOOR= (skip the SELECT 1 floor), BENCH_BINDING=
#   (skip bench/binding.sh), BENCH_BODY_BYTES=16384 (requests of that size; bench/common.sh), BENCH_PRELOAD= (the
#   library not preloaded; see PRELOAD below), and
#   BENCH_WORKLOADS=replay BENCH_CLIENTS=8 BENCH_SYNC=off BENCH_ROUNDS=1 BENCH_GROWTH= BENCH_SWEEP_KEYS=0 \
#     BENCH_DOCS=/tmp/bench-docs bash bench/run.sh
# Follow-ups for what the rounds here cannot resolve: bench/ab.sh (alternating pairs of two variants of
# the new-key cycle, for gaps of a few per cent), bench/sweep_waits.sh (what claims wait on during a sweep) and
# bench/one_call_sweep.sh (one idem_sweep() call on a fresh server, timed). bench/binding.sh (tenant binding's
# cost) runs after a full run's rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=full
case "${1:-}" in --smoke) mode=smoke ;; "") ;; *) echo "usage: $0 [--smoke]" >&2; exit 2 ;; esac

full_or_smoke() { if [ $mode = smoke ]; then echo "$2"; else echo "$1"; fi; }
# Below 32768: ports from the ephemeral range can be taken by client sockets.
PORT=${BENCH_PORT:-$(full_or_smoke 25440 25441)}
SECS=${BENCH_SECONDS:-$(full_or_smoke 5 1)}           # measured seconds per pgbench run
WARMUP=${BENCH_WARMUP:-$(full_or_smoke 2 0)}          # seconds of the same run first, discarded
ROUNDS=${BENCH_ROUNDS:-$(full_or_smoke 3 1)}          # the report shows the median of the rounds
CLIENTS=${BENCH_CLIENTS:-$(full_or_smoke "1 8 32" 2)}
SYNCS=${BENCH_SYNC:-$(full_or_smoke "off on" off)}
WORKLOADS=${BENCH_WORKLOADS:-new replay busy mismatch}
BASE_KEYS=${BENCH_BASE_KEYS:-$(full_or_smoke 10000 1000)} # finished and busy keys stored for the main workloads
GROWTH=${BENCH_GROWTH-$(full_or_smoke "10000 1000000 10000000" 10000)} # stored keys per growth step (empty: skip)
GROWTH_CLIENTS=${BENCH_GROWTH_CLIENTS:-8}
SWEEP_KEYS=${BENCH_SWEEP_KEYS:-$(full_or_smoke 1000000 2000)} # expired keys idem_sweep deletes (0: skip)
FLOOR=${BENCH_FLOOR-1}                                # empty: skip the round-trip floor section
# Empty: the library is not preloaded, as on a managed service, where the portable edition runs. There, and in
# the portable edition's sessions, idem_keys.* are unset; preloaded, the extension defines them, SHOW prints
# 5min for the lease, and the portable edition parses them on each call, as for a caller who SETs them. The
# sweep section needs the library preloaded.
PRELOAD=${BENCH_PRELOAD-idem_keys}
SWEEP_BASE_SECONDS=${BENCH_SWEEP_SECONDS:-$(full_or_smoke 10 1)}
SWEEP_ROUNDS=${BENCH_SWEEP_ROUNDS:-$(full_or_smoke 3 1)} # each sweep's verdict: the median of its rounds' ratios
SWEEP_CLIENTS=4 SWEEP_RATE=200                        # claims/s arriving during the sweep: a served API, not a flood
# Sized as a server holding 10 M keys would be: one contender's growth table (5.4 GB at 10 M keys, more after
# the new-key runs) fits in shared_buffers, mapped in 2 MB pages. docs/benchmarks.md shows what 2 GB or 4 kB pages cost.
SHARED_BUFFERS=${BENCH_SHARED_BUFFERS:-$(full_or_smoke 8GB 128MB)}
HUGE_PAGES=${BENCH_HUGE_PAGES-$(full_or_smoke 1 "")}
DOCS=${BENCH_DOCS:-docs}
NPROC=$(nproc)
read -ra contenders <<<"${BENCH_CONTENDERS:-sql plpgsql idem portable}" # a subset only for follow-up runs
declare -A TABLE=([sql]=bench_sql.keys [plpgsql]=bench_plpgsql.keys [idem]=public.idem_keys [portable]=bench_portable.idem_keys)

source bench/common.sh

started=$SECONDS
dir=$(mktemp -d /tmp/idem-bench.XXXXXX)  # short: it holds the server's Unix socket
mkdir -p "$dir/scripts" "$dir/logs"
hugepages_before=$(cat /proc/sys/vm/nr_hugepages)
cleanup() {
  local rc=$?
  bash scripts/cluster.sh stop "$dir"
  echo "$hugepages_before" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
  if ((rc)) && [ -f "$dir/server.log" ]; then
    # A backend killed by a signal here usually means the extension's .so was replaced mid-run: rerun.
    echo "--- server log: errors" >&2
    grep -E 'ERROR|FATAL|PANIC|terminated by signal' "$dir/server.log" | tail -n 20 >&2 || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "bench: FAILED: $*" >&2; exit 1; }

if [ $mode = full ] && ! bench/.venv/bin/python -c 'import matplotlib' 2>/dev/null; then
  # Before the hour of measuring, not after it: the charts need matplotlib. Debian's python3 needs
  # python3-venv for `-m venv`.
  python3 -c 'import ensurepip' 2>/dev/null || { apt-get update -qq && apt-get install -y -qq python3-venv; }
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install -q -r bench/requirements.txt
fi

# --- the server: checkpoints and WAL recycling spaced out so they do not land inside short runs
# The sweeper is preloaded but idle until the sweep section turns it on; it starts a pass as it starts, and
# the next one only a minute later, so its last pass is the one that swept the backlog.
# Huge pages: reserved for the run (restored on exit) as shared_buffers plus a margin for the rest of
# shared memory. A kernel that will not give them (a container) gets 4 kB pages and a warning; the settings
# table in the report says which it was.
huge_pages=off
if [ -n "$HUGE_PAGES" ]; then
  sb_mb=$(numfmt --from=iec "${SHARED_BUFFERS%B}" | awk '{print int($1 / 1048576)}')
  want=$((sb_mb / 2 + sb_mb / 32 + 64))
  echo "$want" >/proc/sys/vm/nr_hugepages 2>/dev/null || true
  if [ "$(cat /proc/sys/vm/nr_hugepages)" -ge "$want" ]; then
    huge_pages=on
  else
    echo "bench: WARNING: the kernel gave $(cat /proc/sys/vm/nr_hugepages) of $want huge pages; 4 kB pages instead" >&2
  fi
fi
bash scripts/cluster.sh start "$dir" "$PORT" "shared_buffers = $SHARED_BUFFERS" "huge_pages = $huge_pages" "max_connections = 100" \
  "max_wal_size = 8GB" "checkpoint_timeout = 30min" "synchronous_commit = on" "fsync = on" \
  "shared_preload_libraries = '$PRELOAD'" "idem_keys.sweep_enabled = off" "idem_keys.sweep_interval = 60" \
  "log_min_messages = warning" "log_checkpoints = on"
sql -f bench/schema.sql >/dev/null
# The portable edition, from the file `make portable` writes, in a schema of its own (bench/schema.sql).
python3 scripts/portable.py "$dir/idem_keys_portable.sql" >/dev/null
sql -c "CREATE SCHEMA bench_portable" -c "SET search_path = bench_portable" -f "$dir/idem_keys_portable.sql" >/dev/null
settings=$(sql -F ' | ' -c "SELECT '| ' || name, current_setting(name) || ' |' FROM pg_settings
  WHERE name IN ('server_version', 'shared_buffers', 'effective_cache_size', 'work_mem', 'max_connections',
                 'synchronous_commit', 'fsync', 'full_page_writes', 'wal_level', 'wal_compression', 'max_wal_size',
                 'checkpoint_timeout', 'autovacuum', 'huge_pages', 'jit') ORDER BY name")
echo "=== bench ($mode): server on port $PORT, idem_keys $(sql -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'")"
echo "$settings"
{
  echo "## Machine, server and run"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src sql 2>/dev/null || echo ' (src/ or sql/ modified)')"
  echo "- rerun: \`make bench\` (= \`bash bench/run.sh\`); knobs are at the top of bench/run.sh"
  echo "- machine: \`nproc\` $NPROC, $(lscpu | sed -n 's/^Model name: *//p'), \`free -g\` total $(free -g | awk '/^Mem:/ {print $2}') GiB, kernel \`uname -r\` $(uname -r)"
  echo "- pgbench: $($PGBENCH --version), \`-M prepared\`, on the same machine (it shares the $NPROC cores)"
  echo "- each run: ${WARMUP} s warm-up (discarded), then ${SECS} s measured; ${ROUNDS} round(s), contenders rotated each round"
  echo "- clients: $CLIENTS; synchronous_commit: $SYNCS (per session, PGOPTIONS); $BASE_KEYS finished and $BASE_KEYS in-progress keys stored"
  echo "- request body: ${#BODY} bytes (BENCH_BODY_BYTES); shared_preload_libraries: '${PRELOAD}' (BENCH_PRELOAD)"
  echo
  echo "| setting | value |"
  echo "|---|---|"
  echo "$settings"
} >"$dir/meta.md"
printf 'section\tworkload\tcontender\tclients\tsync\tround\tkeys\ttps\tp50\tp99\tn\n' >"$dir/results.tsv"
: >"$dir/facts.tsv"
fact() { printf '%s\t%s\n' "$1" "$2" >>"$dir/facts.tsv"; }

# populate CONTENDER KIND SCOPE LO HI: stored keys in one of the states bench.populate knows.
populate() {
  sql -v tbl="${TABLE[$1]}" -v kind="$2" -v scope="$3" -v lo="$4" -v hi="$5" -v req="$BODY" -v resp="$RESP" \
    -v hdrs="$HDRS" <<'SQL'
CALL bench.populate(:'tbl', :'kind', :'scope', :'lo', :'hi', :'req', :'resp', :'hdrs');
SQL
}

# --- pgbench scripts: the key, the contender's claim, the outcome check, and for new keys its finish.
# An unexpected outcome aborts the client (pgbench then exits 2): the numbers are only of runs that did
# what the workload says.
expect() { # expect CODE LABEL (1 claimed, 2 replay, 3 in_progress, 4 mismatch, 5 recovered)
  printf '\\set expect %s\n\\if :oc != :expect\n\\shell echo bench: %s: expected outcome :expect got :oc 1>&2\n' "$1" "$2"
  printf '\\set abort 1/0\n\\endif\n'
}
workload_script() { # CONTENDER WORKLOAD
  local c=$1 wl=$2
  case $wl in
    new | claim) echo '\set key random(1, 9000000000000000000)' ;;
    recent) echo '\set key random(greatest(1, :nkeys - 9999), :nkeys)' ;; # a retry: one of the newest 10 000 keys
    *) echo '\set key random(1, :nkeys)' ;;
  esac
  cat "bench/scripts/$c/claim.pgbench"
  case $wl in new | claim) expect 1 "$c $wl" ;; replay | recent) expect 2 "$c $wl" ;; busy) expect 3 "$c $wl" ;; mismatch) expect 4 "$c $wl" ;; esac
  if [ "$wl" = new ]; then cat "bench/scripts/$c/finish.pgbench"; fi
}
check_script() { # CONTENDER: one pass through every outcome, with the stored answer compared on replay
  local c=$1 claim="bench/scripts/$1/claim.pgbench" finish="bench/scripts/$1/finish.pgbench"
  echo '\set key random(1, 9000000000000000000)'
  echo "SELECT 'check' AS scope, :body AS req \gset"
  cat "$claim"; expect 1 "$c first claim"
  cat "$finish"
  cat "$claim"; expect 2 "$c retry after finish"
  echo "SELECT (:status = 201 AND :response::jsonb = :resp::jsonb AND :headers::jsonb = :hdrs::jsonb)::int AS same \gset"
  printf '\\if :same != 1\n\\shell echo bench: %s: replay did not return the stored answer 1>&2\n\\set abort 1/0\n\\endif\n' "$c"
  echo "SELECT :body2 AS req \gset"
  cat "$claim"; expect 4 "$c finished key, other body"
  echo "SELECT 'busy' AS scope, :body AS req \gset"
  echo '\set key 1'
  cat "$claim"; expect 3 "$c busy key"
  echo "SELECT :body2 AS req \gset"
  cat "$claim"; expect 4 "$c busy key, other body"
  echo "SELECT 'stale' AS scope, :body AS req \gset"
  cat "$claim"; expect 5 "$c dead owner's key"
  cat "$finish"
  cat "$claim"; expect 2 "$c recovered key after finish"
}
for c in "${contenders[@]}"; do
  # Growth runs new, replay and recent even when BENCH_WORKLOADS leaves them out of the main section.
  for wl in $(printf '%s\n' $WORKLOADS new replay claim recent | sort -u); do workload_script "$c" "$wl" >"$dir/scripts/$c-$wl.pgbench"; done
  check_script "$c" >"$dir/scripts/$c-check.pgbench"
done

# pgb LABEL CLIENTS SYNC SCRIPT [pgbench args]: one pgbench run, refused if any transaction failed or any
# client aborted; sets tps. The workload's values (request, answer, scope) are pgbench variables, which
# -M prepared sends as bind parameters.
pgb() {
  local label=$1 clients=$2 sync=$3 file=$4 out rc=0
  shift 4
  out=$dir/pgbench.$BASHPID.out
  PGOPTIONS="-c synchronous_commit=$sync" "$PGBENCH" -n -M prepared -h "$dir" -p "$PORT" -U postgres \
    -c "$clients" -j $((clients < NPROC ? clients : NPROC)) -f "$file" -D body="$BODY" -D body2="$BODY2" \
    -D resp="$RESP" -D hdrs="$HDRS" "$@" postgres >"$out" 2>&1 || rc=$?
  if ((rc)) || grep -q 'aborted' "$out" || ! grep -q '^number of failed transactions: 0 ' "$out"; then
    cat "$out" >&2
    fail "pgbench: $label (exit $rc)"
  fi
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$out")
}
workload_vars() { # WORKLOAD NKEYS: the -D settings of a workload
  case $1 in
    new | claim) wvars=(-D scope=new -D req="$BODY") ;;
    replay | outcome | recent | lookup) wvars=(-D scope=fin -D req="$BODY" -D nkeys="$2") ;;
    busy) wvars=(-D scope=busy -D req="$BODY" -D nkeys="$2") ;;
    mismatch) wvars=(-D scope=fin -D req="$BODY2" -D nkeys="$2") ;;
  esac
}
# record SECTION WORKLOAD CONTENDER CLIENTS SYNC ROUND KEYS LOG_PREFIX [--window T0 T1]: a row of results.tsv
record() {
  local n p50 p99
  read -r n p50 p99 < <(python3 bench/report.py stats "${@:8}")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${@:1:7}" "$tps" "$p50" "$p99" "$n" >>"$dir/results.tsv"
  printf '  %-6s %-13s %-7s %2s clients sync %-3s round %s: %9.1f tps  p50 %7.3f ms  p99 %7.3f ms  (%s transactions)\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$tps" "$p50" "$p99" "$n"
}
# measure SECTION WORKLOAD CONTENDER CLIENTS SYNC ROUND KEYS NKEYS [pgbench args]: warm-up, measured run, a row.
measure() {
  local section=$1 wl=$2 c=$3 clients=$4 sync=$5 round=$6 keys=$7 nkeys=$8 prefix=$dir/logs/run
  shift 8
  workload_vars "$wl" "$nkeys"
  local file=$dir/scripts/$c-$wl.pgbench
  if ((WARMUP > 0)); then pgb "warm-up $c $wl" "$clients" "$sync" "$file" "${wvars[@]}" -T "$WARMUP" "$@"; fi
  rm -f "$prefix".*
  pgb "$section $c $wl c=$clients sync=$sync" "$clients" "$sync" "$file" "${wvars[@]}" -T "$SECS" \
    -l --log-prefix="$prefix" "$@"
  record "$section" "$wl" "$c" "$clients" "$sync" "$round" "$keys" "$prefix"
}
vacuum_all() { for c in "${contenders[@]}"; do sql -c "VACUUM ANALYZE ${TABLE[$c]}"; done; sql -c CHECKPOINT; }

# --- data and the semantics check: each contender's own scripts, one pass through every outcome
for c in "${contenders[@]}"; do
  populate "$c" finished fin 1 "$BASE_KEYS"
  populate "$c" busy busy 1 "$BASE_KEYS"
  populate "$c" stale stale 1 1
done
vacuum_all
for c in "${contenders[@]}"; do
  pgb "semantics check $c" 1 on "$dir/scripts/$c-check.pgbench" -t 1
done
echo "=== semantics: claimed, replay (stored answer), mismatch, in_progress, recovered agree for ${contenders[*]}"

# --- main: every workload, client count and synchronous_commit setting; contenders rotated per round
echo "=== main"
for sync in $SYNCS; do
  for wl in $WORKLOADS; do
    for clients in $CLIENTS; do
      for ((r = 1; r <= ROUNDS; r++)); do
        for ((i = 0; i < ${#contenders[@]}; i++)); do
          measure main "$wl" "${contenders[(i + r - 1) % ${#contenders[@]}]}" "$clients" "$sync" "$r" "$BASE_KEYS" "$BASE_KEYS"
        done
      done
    done
  done
done

# --- floor: an empty round trip against idem_keys' replay and idem_lookup of a finished key. The
# same pgbench, connection and protocol; SELECT 1 is what no server-side work at all costs, so replay ÷ floor
# says how close a retry storm gets to the round trip itself. The replay is measured as its targets define it,
# reading the outcome (`outcome`), and as the bench's claim script does it, reading the whole answer into
# pgbench variables (`replay`: a FROM-clause call, the response and headers sent back as text). `row` is
# PostgreSQL's own read of the same row, a prepared SELECT through the same hash index (bench/common.sh).
if [ -n "$FLOOR" ] && [[ " ${contenders[*]} " == *" idem "* ]]; then
  echo "=== floor"
  echo 'SELECT 1;' >"$dir/scripts/floor-replay.pgbench"
  {
    echo '\set key random(1, :nkeys)'
    echo "SELECT array_position('{claimed,replay,in_progress,mismatch,recovered}'::text[],"
    echo '       (idem_claim(:scope, :key::text, :req::jsonb)).outcome) AS oc \gset'
    expect 2 "idem outcome"
  } >"$dir/scripts/idem-outcome.pgbench"
  {
    echo '\set key random(1, :nkeys)'
    echo "SELECT array_position('{claimed,replay,in_progress,mismatch,recovered}'::text[],"
    echo '       (idem_lookup(:scope, :key::text)).outcome) AS oc \gset'
    expect 2 "idem lookup"
  } >"$dir/scripts/idem-lookup.pgbench"
  # PostgreSQL's own read of the same row, through the hash index a replay probes (bench/common.sh).
  read_script select_hash_req :nkeys "$dir/scripts/row-outcome.pgbench"
  read_script select_hash :nkeys "$dir/scripts/row-lookup.pgbench"
  floor_runs=("floor replay" "idem outcome" "idem replay" "idem lookup" "row outcome" "row lookup")
  for sync in $SYNCS; do
    for clients in $CLIENTS; do
      for ((r = 1; r <= ROUNDS; r++)); do
        for ((i = 0; i < ${#floor_runs[@]}; i++)); do
          read -r c wl <<<"${floor_runs[(i + r - 1) % ${#floor_runs[@]}]}"
          measure floor "$wl" "$c" "$clients" "$sync" "$r" "$BASE_KEYS" "$BASE_KEYS"
        done
      done
    done
  done
fi

# --- sweep: expired keys deleted while claims arrive at a fixed rate, against the same claims alone. Three
# times: by the background worker and by CALL idem_sweep_paced() (the pg_cron way), both a transaction per
# batch with idem_keys.sweep_delay between, and by one idem_sweep() call (one transaction). SWEEP_ROUNDS
# rounds of the three, their order rotated: a p99 is the 20th-slowest of about 2000 claims, and one sweep's
# ratio swings around 2x from run to run.
# sweep_while_claiming HOW ROUND (worker|paced|call): fills SWEEP_KEYS expired keys, sweeps them, records the claims.
sweep_while_claiming() {
  local how=$1 round=$2 flag=$dir/sweep.$1.$2.done before deleted t0 t1 logs=$dir/logs/$1-r$2
  populate idem expired expired 1 "$SWEEP_KEYS"
  vacuum_all
  # The same claims without a sweep, right before this one: on this machine the claims' p99 alone drifts
  # by 2-100x from minute to minute (2.1 to 207 ms in full runs), so each sweep is held against its own.
  pgb "claims without sweep" "${claim[@]}" -T "$SWEEP_BASE_SECONDS" -l --log-prefix="$logs-alone"
  record sweep "claim_without_$how" idem $SWEEP_CLIENTS on "$round" "$SWEEP_KEYS" "$logs-alone"
  # Claims in short pgbench runs until the sweep is over; their logs are cut to the sweep's window.
  (
    i=0
    until [ -e "$flag" ]; do
      i=$((i + 1))
      pgb "claims during sweep" "${claim[@]}" -T $((SECS < 2 ? SECS : 2)) -l --log-prefix="$logs-during.$i"
    done
  ) &
  claims=$!
  sleep 1.5
  if [ "$how" = worker ]; then
    # The sweeper records a sweep when it ends; its counter says when all keys are gone.
    before=$(sql -c "SELECT coalesce(removed_since_start, 0) FROM idem_sweep_status()")
    t0=$(date +%s.%N)
    sql -c "ALTER SYSTEM SET idem_keys.sweep_enabled = on" -c "SELECT pg_reload_conf()" >/dev/null
    # Waited for from one connection (bench.await_sweep); the sweep's end is the sweeper's own record of it.
    sql -c "CALL bench.await_sweep($((before + SWEEP_KEYS)), '10 minutes')" >/dev/null ||
      fail "the sweeper did not delete $SWEEP_KEYS keys in 10 minutes"
    t1=$(sql -c "SELECT extract(epoch FROM last_sweep_at) FROM idem_sweep_status() WHERE last_sweep_removed = $SWEEP_KEYS")
    [ -n "$t1" ] || fail "the sweeper took more than one pass over the $SWEEP_KEYS keys"
    deleted=$(sql -c "SELECT removed_since_start - $before FROM idem_sweep_status()")
    sql -c "ALTER SYSTEM RESET idem_keys.sweep_enabled" -c "SELECT pg_reload_conf()" >/dev/null
  elif [ "$how" = paced ]; then
    t0=$(date +%s.%N)
    deleted=$(sql -c 'CALL idem_sweep_paced()')
    t1=$(date +%s.%N)
  else
    t0=$(date +%s.%N)
    deleted=$(sql -c 'SELECT idem_sweep()')
    t1=$(date +%s.%N)
  fi
  sleep 0.5
  touch "$flag"
  wait $claims || fail "claims during the sweep"
  [ "$deleted" = "$SWEEP_KEYS" ] || fail "the $how sweep deleted $deleted keys, expected $SWEEP_KEYS"
  seconds=$(python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.3f}")' "$t0" "$t1")
  tps=$SWEEP_RATE  # the offered rate; the row's count says how many claims fell inside the sweep
  record sweep "claim_during_$how" idem $SWEEP_CLIENTS on "$round" "$SWEEP_KEYS" "$logs-during" --window "$t0" "$t1"
  fact "sweep_deleted_$how:$round" "$deleted"
  fact "sweep_seconds_$how:$round" "$seconds"
  echo "  $how sweep (round $round) deleted $deleted keys in $seconds s"
}
if ((SWEEP_KEYS > 0)); then
  echo "=== sweep of $SWEEP_KEYS expired keys (claims at $SWEEP_RATE/s from $SWEEP_CLIENTS clients, sync on)"
  workload_vars claim 0
  claim=($SWEEP_CLIENTS on "$dir/scripts/idem-claim.pgbench" "${wvars[@]}" -R $SWEEP_RATE)
  batch=$(sql -c 'SHOW idem_keys.sweep_batch_size') delay=$(sql -c 'SHOW idem_keys.sweep_delay')
  hows=(worker paced call)
  for ((r = 1; r <= SWEEP_ROUNDS; r++)); do
    for ((i = 0; i < ${#hows[@]}; i++)); do sweep_while_claiming "${hows[(i + r - 1) % ${#hows[@]}]}" "$r"; done
  done
  fact sweep_note "batches of idem_keys.sweep_batch_size = $batch; the worker and CALL idem_sweep_paced() commit each and rest idem_keys.sweep_delay = $delay between them, one idem_sweep() call runs them all in one transaction"
fi

# --- growth: the new-key and replay cycles with more and more keys stored. Each contender's table is
# filled alone, the others empty, as a server holds one such table, so no curve pays for the other tables'
# memory (10 M keys each is about 16 GB side by side; BENCH_GROWTH_TOGETHER=1 fills them together again).
# Replay twice: of any stored key (uniform: the worst case for memory) and of one of the newest 10 000 (what
# a retry is: it follows its first attempt within minutes).
if [ -n "$GROWTH" ]; then
  # Each group is a space-separated list of the contenders whose tables are filled together.
  if [ -n "${BENCH_GROWTH_TOGETHER:-}" ]; then
    groups=("${contenders[*]}") note="the contenders' tables filled side by side in the one server, contenders rotated per round"
  else
    groups=("${contenders[@]}") note="each contender's table filled alone (the others empty), as a server holds one"
  fi
  fact growth_note "$note"
  echo "=== growth: $GROWTH stored keys ($GROWTH_CLIENTS clients, sync off); $note"
  for group in "${groups[@]}"; do
    read -ra filled <<<"$group"
    for c in "${contenders[@]}"; do sql -c "TRUNCATE ${TABLE[$c]}"; done
    stored=0
    for size in $GROWTH; do
      step=$SECONDS
      for c in "${filled[@]}"; do populate "$c" finished fin $((stored + 1)) "$size"; done
      stored=$size
      vacuum_all # the empty tables take no time
      for c in "${filled[@]}"; do
        fact "bytes_per_key:$c:$size" "$(sql -c "SELECT pg_total_relation_size('${TABLE[$c]}') / count(*) FROM ${TABLE[$c]}")"
      done
      echo "  $size keys stored in ${filled[*]} (filled and vacuumed in $((SECONDS - step)) s)"
      for ((r = 1; r <= ROUNDS; r++)); do
        for wl in new replay recent; do
          for ((i = 0; i < ${#filled[@]}; i++)); do
            measure growth $wl "${filled[(i + r - 1) % ${#filled[@]}]}" "$GROWTH_CLIENTS" off "$r" "$size" "$size"
          done
        done
      done
    done
  done
fi

# --- the report
if [ $mode = smoke ]; then
  python3 bench/report.py render "$dir" "$dir/benchmarks.md"
  echo "=== smoke numbers: ${SECS} s runs on tiny data, one round; they only show that every path runs"
  sed -n '/^## Targets/,/^<!--/p' "$dir/benchmarks.md" | grep -v '^<!--'
else
  mkdir -p "$DOCS/bench"
  bench/.venv/bin/python bench/report.py render "$dir" "$DOCS/benchmarks.md" --charts "$DOCS/bench"
  cp "$dir/results.tsv" "$DOCS/bench/results.tsv"
  echo "=== wrote $DOCS/benchmarks.md and $DOCS/bench/"
fi
# Tenant binding's A/B pairs (docs/benchmarks.md, Tenant binding), on their own server after the rounds.
[ $mode = smoke ] || [ -z "${BENCH_BINDING-1}" ] || bash bench/binding.sh
# BENCH_RESULTS=FILE keeps the raw rows of any run, smoke included (bench/majors.sh compares majors with them).
[ -z "${BENCH_RESULTS:-}" ] || cp "$dir/results.tsv" "$BENCH_RESULTS"
echo "=== bench ($mode): ok in $((SECONDS - started)) s"
