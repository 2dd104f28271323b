# Shared by the shell test suites (crash, worker, lifecycle): source it after setting `suite`.
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
