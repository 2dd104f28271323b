#!/usr/bin/env bash
# `make test`: every test tier against real PostgreSQL servers of every supported major, one timing line
# per stage and major.
#   scripts/test.sh            all stages on every major
#   scripts/test.sh STAGE...   only these (pgtest regress isolation upgrade portable lifecycle package crash worker
#                              failover e2e http powertools pgbouncer drivers ha scaleout citus bench; and build,
#                              the release build alone)
#   PG_MAJORS="15 18"          only these majors (default: all of SUPPORTED_MAJORS in scripts/pg_major.sh)
# Every stage runs on 15, the host's own PostgreSQL. On 16, 17 and 18 the stages that exercise the server
# (EVERY_MAJOR below) run too: 16 on the host from the pgserver wheel's tree (scripts/pg16.sh), 17 and 18
# inside that major's Debian root (scripts/pg_root.sh, built on first use); the
# client-side ones (lifecycle's dump and standby scripts, the e2e services, PgBouncer, the JDBC and asyncpg
# drivers, the HA manager's failovers, the PL/Proxy router) run once, on 15, and so does the benchmark harness's
# smoke run (it checks that the harness still runs, not a major's behaviour; about 60 s a major). Citus runs
# on one major it supports (STAGE_MAJORS), inside that major's root, where its build is cached.
# BLESS=1 copies the golden-file outputs over the expected files (review the diff before committing).
set -eEuo pipefail # -E: the ERR trap below also fires inside functions
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
export PATH="$HOME/.cargo/bin:$PATH"

stages=("$@")
((${#stages[@]})) || stages=(pgtest regress isolation upgrade portable lifecycle package crash worker failover e2e http powertools pgbouncer drivers ha scaleout citus bench)
EVERY_MAJOR=" pgtest regress isolation upgrade portable package crash worker failover "
# Stages that run on these majors only, instead of the rule above. Citus 14 supports 16, 17 and 18; one major
# proves the integration (each further major would add the stage's time again, and a Citus build on a fresh
# machine: docs/scale-out.md).
declare -A STAGE_MAJORS=([citus]="17")

scratch_dir() { # a postgres-owned scratch directory with a short path (it holds Unix sockets)
  local d; d=$(mktemp -d /tmp/idem.XXXXXX); chown postgres: "$d"; echo "$d"
}

# Runs a stage under `set -e` (not inside an `if`, which would switch -e off), with a timing line either way.
timed() {
  stage_name=$1 stage_start=$SECONDS
  shift
  echo "=== stage $stage_name"
  "$@"
  echo "=== stage $stage_name: ok in $((SECONDS - stage_start)) s"
}
trap 'echo "=== stage ${stage_name:-setup}: FAILED after $((SECONDS - ${stage_start:-0})) s"' ERR

# The release build, installed once per major's run: a stage after the first finds it there. Reinstalling would
# rewrite the library in place under a server still running it (the worker stage's, in the background).
release_installed=""
install_release() {
  [ -n "$release_installed" ] && return 0
  cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null
  release_installed=yes
}

# Unit tests, #[pg_test]s, multi-session and property tests: cargo pgrx test with its own cluster.
stage_pgtest() {
  python3 scripts/check_imports.py | tail -1 # the modules of src/ import downwards, with no circle
  local base; base=$(scratch_dir)
  cargo pgrx test "pg$PG_MAJOR" --runas postgres --pgdata "$base"
  rm -rf "$base"
  release_installed="" # cargo pgrx test installed its own build (with the test functions) over it
}

# Golden-file tests of the SQL surface, with pg_regress and a temporary instance.
# Then again with idem_keys.direct_path = off: claim and finish through SPI must give the same golden output
# (surface, which lists the settings, runs once).
stage_regress() {
  install_release
  local tests; tests=$(ls tests/pg_regress/sql | sed 's/\.sql$//' | sort)
  run_pg_regress regress tests/pg_regress "$tests"
  run_pg_regress regress tests/pg_regress "$(grep -vx surface <<<"$tests")" "idem_keys.direct_path = off"
  check_verbatim_quotes
}

# Docs that quote a golden file say so (<!-- verbatim: FILE -->); the quoted block must still be in it, line
# for line, so the examples cannot drift from what the server prints.
check_verbatim_quotes() {
  python3 - docs/*.md README.md <<'PY'
import re, sys
bad = 0
for doc in sys.argv[1:]:
    text = open(doc).read()
    for source, block in re.findall(r"<!-- verbatim: (\S+) -->\n```\n(.*?)```", text, re.S):
        if block not in open(source).read():
            print(f"{doc}: the block quoted from {source} is no longer in it")
            bad += 1
sys.exit(1 if bad else 0)
PY
}

# Races, with PostgreSQL's own isolation tester: one spec per race, every listed interleaving.
stage_isolation() {
  install_release
  local specs; specs=$(ls tests/isolation/specs | sed 's/\.spec$//' | sort)
  run_pg_regress isolation tests/isolation "$specs"
  run_pg_regress isolation tests/isolation "$specs" "idem_keys.direct_path = off"
}

# The suites that are one script against the installed release build (tests/<name>/run.sh):
#   upgrade    every released version -> this one: keys survive, catalog equal to a fresh install
#   portable   the portable SQL edition: the extension's golden files and isolation specs, security, settings,
#              the same API and fingerprints, moves between editions, upgrade, pg_cron (tests/portable/run.sh)
#   lifecycle  pg_dump/pg_restore, a streaming hot standby and its promotion
#   crash      kill -9 of a backend mid-request, and an immediate shutdown under load
#   worker     the sweeper background worker (preloaded) and pg_cron, against a real server
stage_suite() {
  install_release
  bash "tests/$1/run.sh"
}

# make package's .deb and tarball install into a clean PostgreSQL (and the dev build is put back after).
stage_package() {
  bash tests/package/run.sh # removes the release install, and puts it back when it is done
  release_installed=yes
}

# The Go, Python and Node example services under the same attack (double tap, dead inverter, retry storm), and
# the Python one against the portable edition.
stage_e2e() {
  install_release
  bash tests/e2e/setup.sh
  bash tests/e2e/run.sh
  echo "--- the Python service again, against the portable edition"
  E2E_PORTABLE=1 bash tests/e2e/run.sh python
}

# No phantom replay after a primary's crash with a synchronous standby (it reads the server's WalSndCtl, so
# on every major).
stage_failover() {
  install_release
  bash tests/failover/phantom.sh
}

# Behind PgBouncer's transaction pooling: the contract with psycopg, the traps it avoids, and the e2e services.
stage_pgbouncer() {
  install_release
  bash scripts/apt_install.sh pgbouncer pgbouncer
  bash tests/e2e/setup.sh
  bash tests/pgbouncer/run.sh
}

# Two more drivers with a client test of the contract each: Java over JDBC, Python's asyncpg.
stage_drivers() {
  install_release
  bash tests/drivers/run.sh
}

# The five middlewares (packages/): each package's own tests at both ends of its range, then one HTTP behaviour
# suite against a sample payments app on each, on the extension and on the portable edition, on the newest stacks
# (the Debian roots: scripts/stacks.sh) and the oldest (this host) (tests/http/README.md).
stage_http() {
  install_release
  bash tests/http/run.sh
  bash bench/http.sh --smoke # the middlewares' benchmark runs, so it never rots (not a measurement)
}

# The AWS Powertools stores for Python and TypeScript under Powertools' own decorators, on both editions, and
# the comparison with Powertools' Redis store in smoke mode (tests/powertools/run.sh).
stage_powertools() {
  install_release
  bash tests/powertools/run.sh
}

# Failovers under an HA manager (pg_auto_failover 2.0, Debian's package for this major): the e2e services and
# SQL clients in a retry storm through a multi-host string, across a postmaster crash and a lost host.
stage_ha() {
  install_release
  bash scripts/apt_install.sh ha "postgresql-$PG_MAJOR-auto-failover" pg-auto-failover-cli
  bash tests/e2e/setup.sh
  bash tests/failover/ha.sh
}

# Sharding through PL/Proxy: four partitions and a router with idem_keys_proxy; the contract, the errors, the
# fan-out verbs, the drivers and the e2e services through the router, and a partition stopped mid-storm.
stage_scaleout() {
  install_release
  bash scripts/install_proxy.sh
  bash scripts/apt_install.sh scaleout "postgresql-$PG_MAJOR-plproxy" default-jdk-headless libpostgresql-jdbc-java
  bash tests/e2e/setup.sh
  bash scripts/python_venv.sh scaleout tests/drivers/.venv tests/drivers/requirements.txt
  bash tests/scaleout/run.sh
  bash bench/scaleout.sh --smoke # the hop benchmark runs, so it never rots (not a measurement)
}

# idem_keys on Citus 14.0.1: a coordinator and two workers, both editions distributed by scope; the contract
# through the coordinator, the sweep on every worker, a worker down, a worker added and the shards moved under
# load (tests/citus/run.sh); then the hop benchmark in smoke mode against one server and a PL/Proxy router.
stage_citus() {
  install_release
  bash scripts/citus.sh ensure
  bash scripts/install_proxy.sh
  bash scripts/apt_install.sh citus python3-psycopg "postgresql-$PG_MAJOR-plproxy"
  bash tests/citus/run.sh
  bash bench/citus.sh --smoke # the hop benchmark runs, so it never rots (not a measurement)
}

# What a major's stages compile, compiled ahead: the pgtest stage's test harness and the build with the test
# functions it installs (the same cargo invocations cargo pgrx test and pgrx-tests make, so cargo finds them fresh
# then), and the release build the other stages install. The background set-up runs it for each other major while
# the host's stages run.
stage_build() {
  local features="pg$PG_MAJOR pg_test"
  local log; log=$(mktemp)
  PGRX_FEATURES=$features PGRX_NO_DEFAULT_FEATURES=true PGRX_ALL_FEATURES=false PGRX_BUILD_PROFILE=dev \
    PGRX_NO_SCHEMA=false cargo test --no-run --features "$features" --no-default-features >"$log" 2>&1 \
    || { cat "$log"; rm -f "$log"; return 1; }
  rm -f "$log"
  cargo pgrx install --test --pg-config "$PG_CONFIG" --features "$features" --no-default-features >/dev/null
  install_release
}

# The benchmark harness in smoke mode (a few seconds per contender), so it never rots. Not a measurement.
stage_bench() {
  install_release
  bash bench/run.sh --smoke
}

# $1 tool (regress|isolation), $2 suite directory, $3 test names, $4 an optional extra server setting;
# compares against $2/expected.
run_pg_regress() {
  local tool=$1 suite=$2 tests=$3 setting=${4:-} scratch status=0
  [ -z "$setting" ] || echo "--- again with $setting"
  scratch=$(scratch_dir)
  cp -r "$suite"/. "$scratch"/
  mkdir -p "$scratch/expected"
  for t in $tests; do touch "$scratch/expected/$t.out"; done
  printf "timezone = 'UTC'\n%s\n" "$setting" > "$scratch/extra.conf"
  chown -R postgres: "$scratch"
  local runner="$PGXS_TEST/regress/pg_regress"
  [ "$tool" = isolation ] && runner="$PGXS_TEST/isolation/pg_isolation_regress"
  # shellcheck disable=SC2086
  (cd / && sudo -u postgres env -u RUST_BACKTRACE "$runner" --temp-instance="$scratch/instance" --temp-config="$scratch/extra.conf" \
    --bindir="$("$PG_CONFIG" --bindir)" --inputdir="$scratch" --outputdir="$scratch" --load-extension=idem_keys $tests) || status=$? # from /, as scripts/cluster.sh says why
  rm -rf "$suite/results"; mkdir -p "$suite/results"
  cp "$scratch"/results/*.out "$suite/results/" 2>/dev/null || true
  if [ -n "${BLESS:-}" ]; then
    cp "$suite"/results/*.out "$suite/expected/"
    echo "blessed: $suite/expected (review with git diff)"
    status=0
  elif [ $status -ne 0 ]; then
    cat "$scratch/regression.diffs" 2>/dev/null | head -200
  fi
  rm -rf "$scratch"
  return $status
}

# Stages that run beside the stages after them: their time is bounded polls of a server of their own (the
# sweeper's passes, pg_cron's minute), not cores. Their output is shown whole when the major's other stages end.
BESIDE=" worker "

# The stages of one major, here: PG_CONFIG is that major's, on this machine.
run_here() {
  PG_MAJOR=$(pg_major)
  PGXS_TEST=$("$PG_CONFIG" --pkglibdir)/pgxs/src/test
  local stage beside_pid="" beside_log="" beside_status=0 last=${*: -1}
  for stage in "$@"; do
    local run=(stage_suite "$stage")
    declare -F "stage_$stage" >/dev/null && run=("stage_$stage")
    if [[ $BESIDE == *" $stage "* ]] && [ "$stage" != "$last" ] && [ -z "$beside_pid" ]; then
      install_release # here, before it starts: the stages after it find it installed
      beside_log=$(mktemp /tmp/idem-beside.XXXXXX)
      (timed "$stage (pg$PG_MAJOR)" "${run[@]}") >"$beside_log" 2>&1 &
      beside_pid=$!
      echo "=== stage $stage (pg$PG_MAJOR): started, beside the stages after it"
      continue
    fi
    timed "$stage (pg$PG_MAJOR)" "${run[@]}"
  done
  [ -n "$beside_pid" ] || return 0
  wait "$beside_pid" || beside_status=$?
  cat "$beside_log"; rm -f "$beside_log"
  return "$beside_status"
}

# Inside a major's root (or when the caller picked one PG_CONFIG on purpose): just this major.
if [ -n "${IDEM_ONE_MAJOR:-}" ]; then
  run_here "${stages[@]}"
  exit 0
fi

host_major=$(pg_major)
# picks MAJOR: the stages of this run that run on MAJOR, one per line.
picks() {
  local major=$1 stage
  for stage in "${stages[@]}"; do
    if [ -n "${STAGE_MAJORS[$stage]:-}" ]; then
      [[ " ${STAGE_MAJORS[$stage]} " != *" $major "* ]] || echo "$stage"
    elif [ "$major" = "$host_major" ] || [[ $EVERY_MAJOR == *" $stage "* ]]; then
      echo "$stage"
    fi
  done
}

# Before the other majors' stages, set-up that is not a test: on a fresh machine the Debian roots (17, 18) and
# Citus must be built, the newer stacks the HTTP suite needs installed in the roots, and every major's release
# build compiled. It runs in the background while the host's
# stages run, at the lowest CPU priority: it takes the cores those stages leave idle (most of the HTTP and
# Powertools stages' time is waiting), never theirs. Its output is shown when the first other major starts.
# debootstrap is installed here first: two apt runs on the host would wait on each other.
prepare_pid="" prepare_log=""
roots_needed=() citus_needed=() builds_needed=()
for major in ${PG_MAJORS:-$SUPPORTED_MAJORS}; do
  [ "$major" != "$host_major" ] && [ -n "$(picks "$major")" ] || continue
  [ "$(where_major "$major")" != root ] || roots_needed+=("$major")
  ! grep -qx citus <<<"$(picks "$major")" || citus_needed+=("$major")
  # Every stage that runs on each major installs the release build: compiled here, it is only copied then.
  [ -z "$(picks "$major" | grep -xE "$(echo $EVERY_MAJOR | tr ' ' '|')" || true)" ] || builds_needed+=("$major")
done
if ((${#roots_needed[@]} + ${#builds_needed[@]})); then
  ((${#roots_needed[@]} == 0)) || bash scripts/apt_install.sh pg_root debootstrap
  prepare_log=$(mktemp /tmp/idem-prepare.XXXXXX)
  (
    for major in "${roots_needed[@]}"; do bash scripts/pg_root.sh ensure "$major"; done
    # The newer stacks the HTTP suite runs its apps on (their languages and libraries, in the roots), so the
    # http stage finds them installed. A failure here is the http stage's to report: it sets them up again.
    if grep -qx http <<<"$(picks "$host_major")"; then
      bash -c 'source tests/http/matrix.sh; apps=(); for a in $ALL_APPS; do [ "${newest[$a]}" = host ] || apps+=("$a@${newest[$a]}"); done
               bash tests/http/setup.sh "${apps[@]}"' || echo "(the http stage will set up its stacks itself)"
    fi
    for major in "${builds_needed[@]}"; do
      in_major "$major" bash scripts/setup.sh
      in_major "$major" env IDEM_ONE_MAJOR=1 bash scripts/test.sh build
    done
    for major in "${citus_needed[@]}"; do in_major "$major" bash scripts/citus.sh ensure; done
  ) >"$prepare_log" 2>&1 &
  prepare_pid=$!
  renice -n 19 -p "$prepare_pid" >/dev/null # its children inherit it
  trap '[ -z "$prepare_pid" ] || kill "$prepare_pid" 2>/dev/null || true' EXIT # a stage failed before it was needed
fi
prepared() { # waits for the background set-up, shows what it said
  local status=0
  wait "$prepare_pid" || status=$?
  cat "$prepare_log"; rm -f "$prepare_log"
  prepare_pid=""
  return $status
}

for major in ${PG_MAJORS:-$SUPPORTED_MAJORS}; do
  mapfile -t picked < <(picks "$major")
  ((${#picked[@]})) || continue
  if [ "$major" = "$host_major" ]; then
    run_here "${picked[@]}"
    continue
  fi
  if [ -n "$prepare_pid" ]; then
    timed "roots, builds and Citus, made while the stages above ran" prepared
  fi
  [ "$(where_major "$major")" = root ] && timed "root (pg$major)" bash scripts/pg_root.sh ensure "$major"
  timed "setup (pg$major)" in_major "$major" bash scripts/setup.sh
  timed "all of pg$major" in_major "$major" env IDEM_ONE_MAJOR=1 bash scripts/test.sh "${picked[@]}"
done
