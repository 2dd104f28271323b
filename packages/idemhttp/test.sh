#!/usr/bin/env bash
# idemhttp's tests against $DATABASE_URL (a database with idem_keys: the extension or the portable edition), on the
# stack in $IDEM_STACK. pgx v5 is in Debian sid only, so: bash scripts/stacks.sh run sid bash packages/idemhttp/test.sh
#  1. gofmt here.
#  2. The module as a Go user gets it: a throwaway consumer module requires github.com/idem-keys/idemhttp at the
#     checkout's version (dist.sh's artefact, resolved with Debian's pgx from file module proxies: modenv.sh), builds a
#     program against it, and the program reads that version from its build information.
#  3. go vet and go test (with the race detector where cgo runs) on the package so downloaded, with the contract of
#     <repo>/contract.
#  4. The version comes from a tag: in a temporary clone, dist.sh's version with no tag, after a release tag and a
#     pre-release tag on an older commit, from a tag on HEAD (which a consumer then resolves and builds against), and
#     as given; a malformed one and a v2 are refused. No tag is made in this checkout.
set -euo pipefail
cd "$(dirname "$0")"
pkg=$PWD root=$(cd ../.. && pwd)
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys installed}"
case ${IDEM_STACK:-host} in
  sid) bash "$root/scripts/apt_install.sh" "idemhttp tests" golang-go golang-github-jackc-pgx-v5-dev git ;;
  *)
    echo "idemhttp: needs pgx v5, which Debian ships in sid only (golang-github-jackc-pgx-v5-dev), not on" \
      "${IDEM_STACK:-host}: bash scripts/stacks.sh run sid bash packages/idemhttp/test.sh" >&2
    exit 2
    ;;
esac
fail() { echo "idemhttp test.sh: $*" >&2; exit 1; }

unformatted=$(gofmt -l ./*.go testdata/consumer/*.go)
[ -z "$unformatted" ] || fail "not gofmt-formatted: $unformatted"

eval "$(bash modenv.sh)"
module=$(sed -n 's/^module //p' go.mod)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# consumer DIR VERSION: the consumer program in a new module at DIR that requires idemhttp@VERSION, built and run;
# prints what it prints, the version of idemhttp it was built with.
consumer() {
  mkdir -p "$1"
  cp testdata/consumer/main.go "$1/"
  printf 'module example.com/consumer\n\ngo %s\n' "$(sed -n 's/^go //p' go.mod)" >"$1/go.mod"
  (cd "$1" && go mod edit -require="$module@$2" && go build -o consumer . && ./consumer)
}

# forget VERSION: the module cache drops idemhttp@VERSION, which the next resolve then fetches again.
forget() {
  local stale
  for stale in "$GOMODCACHE/$module@$1" "$GOMODCACHE/cache/download/$module/@v/$1".*; do
    [ ! -e "$stale" ] || { chmod -R u+w "$stale" && rm -rf "$stale"; }
  done
}

built=$(consumer "$work/consumer" "$IDEMHTTP_VERSION")
[ "$built" = "$IDEMHTTP_VERSION" ] || fail "the consumer was built with idemhttp $built, not $IDEMHTTP_VERSION"
echo "idemhttp: $module@$IDEMHTTP_VERSION resolved from $GOPROXY, built"

# The race detector needs cgo and a C compiler; without them the same tests run without it.
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null; then race=(-race); fi
(cd "$work/consumer" && go vet "$module" && IDEM_CONTRACT_DIR=$root/contract go test -count=1 "${race[@]}" "$module")

# The version from the tags, in a clone of this checkout with this directory as it is now.
git clone --quiet "$root" "$work/clone"
clone=$work/clone/packages/idemhttp
rm -rf "$clone" && mkdir -p "$clone"
git ls-files -z --cached --others --exclude-standard . | while IFS= read -r -d '' file; do
  [ ! -f "$file" ] || cp --parents "$file" "$clone/"
done
tag() { git -C "$work/clone" tag "packages/idemhttp/$1" "$2"; }
time=$(TZ=UTC git -C "$work/clone" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
commit=$(git -C "$work/clone" rev-parse HEAD | cut -c1-12)
expect_version() { # expect_version WANT [ARGUMENT]: what dist.sh in the clone prints
  local got
  got=$(bash "$clone/dist.sh" "${@:2}") || fail "dist.sh ${*:2} failed in the clone"
  [ "$got" = "$1" ] || fail "dist.sh ${*:2}: version $got, want $1"
}
expect_version "v0.0.0-$time-$commit"
tag v0.8.1 HEAD~1
expect_version "v0.8.2-0.$time-$commit"
git -C "$work/clone" tag -d packages/idemhttp/v0.8.1 >/dev/null
tag v0.9.0-rc.1 HEAD~1
expect_version "v0.9.0-rc.1.0.$time-$commit"
tag v0.9.0 HEAD
expect_version v0.9.0
expect_version v1.2.3 v1.2.3
for bad in 1.2.3 v1.2 v1.2.3+build v2.0.0; do
  if refusal=$(bash "$clone/dist.sh" "$bad" 2>&1); then fail "dist.sh $bad was accepted"; fi
  [[ $refusal == *"version"*"$bad"* || $refusal == *"$bad"*"version"* ]] || fail "dist.sh $bad: $refusal"
done
bash "$clone/dist.sh" >/dev/null # the artefact of the tag on HEAD, v0.9.0
forget v0.9.0
built=$(GOPROXY="file://$clone/dist,${GOPROXY#*,}" consumer "$work/tagged" v0.9.0)
forget v0.9.0
[ "$built" = v0.9.0 ] || fail "the consumer of the tagged clone was built with idemhttp $built, not v0.9.0"
echo "idemhttp: versions from tags (none, v0.8.1 and v0.9.0-rc.1 before HEAD, v0.9.0 on HEAD, resolved and built) ok"
