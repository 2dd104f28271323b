# Shared by the shell test suites (crash, worker, lifecycle, failover, scaleout, portable, citus): source it after
# setting `suite`.
# sql_at DIR PORT ARGS...: psql against the throwaway cluster in DIR, quiet, unaligned, stopping on error.
sql_at() { local dir=$1 port=$2; shift 2; psql -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres "$@"; }
fail() { echo "$suite: FAILED: $*" >&2; exit 1; }
# poll CMD SQL SECONDS: runs `CMD -c SQL` until it prints "t", at most SECONDS (a bounded wait, no fixed sleep).
poll() {
  local deadline=$((SECONDS + $3))
  until [ "$($1 -c "$2" 2>/dev/null || true)" = t ]; do
    ((SECONDS < deadline)) || fail "timed out after $3 s waiting for: $2"
    sleep 0.1
  done
}
# wait_until SECONDS COMMAND...: runs COMMAND every 0.1 s until it succeeds; false after SECONDS.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < deadline)) || return 1; sleep 0.1; done
}
# processes_in DIR: the pids of the processes whose working directory is DIR (a server's processes all run in
# its data directory).
processes_in() {
  local pid want; want=$(realpath "$1")
  for pid in /proc/[0-9]*; do [ "$(readlink -f "$pid/cwd" 2>/dev/null)" != "$want" ] || echo "${pid#/proc/}"; done
}
no_process_in() { [ -z "$(processes_in "$1")" ]; }
kill_processes_in() { local pid; for pid in $(processes_in "$1"); do kill -9 "$pid" 2>/dev/null || true; done; }
# kill_listed FILE PATTERN...: SIGKILLs each pid listed in FILE (one per line; written by the Python harnesses'
# Process) whose command line still contains one of the PATTERNs, so a reused pid is never someone else's. For a
# cleanup trap, after a harness that could not stop its children (killed, timed out). Nothing if FILE is missing.
kill_listed() {
  local file=$1 pid pattern; shift
  [ -f "$file" ] || return 0
  while read -r pid; do
    for pattern in "$@"; do
      if grep -qs -e "$pattern" "/proc/$pid/cmdline"; then kill -9 "$pid" 2>/dev/null || true; break; fi
    done
  done <"$file"
}
# edition_databases DIR PORT PREFIX: in the throwaway cluster in DIR, the ordinary role shop (LOGIN) and two
# databases it owns (so it may create its tables): PREFIX_ext with the extension, made by postgres, and
# PREFIX_portable with the portable edition, installed by shop, a non-superuser (docs/portable.md). Callers may
# run it side by side, with other prefixes.
edition_databases() {
  local dir=$1 port=$2 prefix=$3 file
  # (Two callers at once may both find the role missing: the loser's insert is a unique_violation.)
  sql_at "$dir" "$port" -d postgres -c "DO \$\$BEGIN CREATE ROLE shop LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN END\$\$" \
    -c "CREATE DATABASE ${prefix}_ext OWNER shop" -c "CREATE DATABASE ${prefix}_portable OWNER shop"
  sql_at "$dir" "$port" -d "${prefix}_ext" -c "CREATE EXTENSION idem_keys"
  file=$(mktemp /tmp/idem_keys_portable.XXXXXX.sql)
  python3 scripts/portable.py "$file" >/dev/null
  chmod 644 "$file"
  psql -X -q -At -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U shop -d "${prefix}_portable" -f "$file"
  rm -f "$file"
}
# stop_child PID: ends a background child of this shell (a storm a failed check left running) and reaps it;
# nothing if PID is empty.
stop_child() { [ -z "$1" ] || { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }; }
# run_goldens TOOL SUITE TEST...: pg_regress (TOOL regress) or pg_isolation_regress (isolation) against an
# existing database, as the superuser the extension's own runs use (some tests SET ROLE to roles they create),
# compared with SUITE/expected: the database GOLDENS_DB at GOLDENS_HOST:GOLDENS_PORT, scratch files under
# GOLDENS_SCRATCH. GOLDENS_EXPECTED, when set, is a directory whose files replace SUITE/expected's of the same
# name (an output that differs there by design). With BLESS set, the results replace SUITE/expected when SUITE
# is GOLDENS_BLESSABLE (golden files of this suite alone); fails the suite with the differences otherwise.
run_goldens() {
  local tool=$1 suite=$2 scratch status=0 pgxs_test; shift 2
  pgxs_test=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test
  scratch=$(mktemp -d "$GOLDENS_SCRATCH/goldens.XXXXXX")
  cp -r "$suite"/. "$scratch"/
  rm -rf "$scratch/results"
  mkdir -p "$scratch/expected"
  for t in "$@"; do touch "$scratch/expected/$t.out"; done
  [ -z "${GOLDENS_EXPECTED:-}" ] || cp "$GOLDENS_EXPECTED"/*.out "$scratch/expected/"
  chown -R postgres: "$scratch"
  local runner="$pgxs_test/regress/pg_regress"
  [ "$tool" = isolation ] && runner="$pgxs_test/isolation/pg_isolation_regress"
  sudo -u postgres env -u RUST_BACKTRACE "$runner" --use-existing --host="$GOLDENS_HOST" --port="$GOLDENS_PORT" \
    --user=postgres --dbname="$GOLDENS_DB" --bindir="$("$PG_CONFIG" --bindir)" --inputdir="$scratch" \
    --outputdir="$scratch" "$@" || status=$?
  if [ -n "${BLESS:-}" ] && [ "$suite" = "${GOLDENS_BLESSABLE:-}" ]; then
    cp "$scratch"/results/*.out "$suite/expected/"
    echo "blessed: $suite/expected (review with git diff)"
    return 0
  fi
  [ $status -eq 0 ] || { head -200 "$scratch/regression.diffs"; fail "$tool goldens of $suite differ (above)"; }
}
