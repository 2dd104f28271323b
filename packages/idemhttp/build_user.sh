#!/usr/bin/env bash
# build_user.sh WHO DIR OUTPUT: builds the Go program in DIR (a module that requires idemhttp: the Go example, the
# HTTP suite's sample app) into OUTPUT, as a Go user would against idemhttp's artefact, on the stack in $IDEM_STACK,
# after installing Go and pgx v5 from Debian if they are missing. idemhttp needs pgx v5, which Debian ships in sid
# only: run it there (bash scripts/stacks.sh run sid ...). Module mode with no network: idemhttp from its artefact
# and pgx from Debian's sources, both through file module proxies (modenv.sh); DIR's go.mod is copied beside OUTPUT
# (bin/$IDEM_STACK under DIR) and made to require that idemhttp, so the checkout is left as it is. The caller's
# environment reaches `go build` (CGO_ENABLED=0 for a static binary). Idempotent; Go's build cache makes a rebuild
# with nothing changed cheap.
set -euo pipefail
who=${1:?usage: build_user.sh WHO DIR OUTPUT} dir=$(cd "${2:?usage: build_user.sh WHO DIR OUTPUT}" && pwd)
output=${3:?usage: build_user.sh WHO DIR OUTPUT}
here=$(cd "$(dirname "$0")" && pwd)
stack=${IDEM_STACK:-host}
case $stack in
  sid) bash "$here/../../scripts/apt_install.sh" "$who" golang-go golang-github-jackc-pgx-v5-dev git ;;
  *)
    echo "$who: idemhttp needs pgx v5, which Debian ships in sid only (golang-github-jackc-pgx-v5-dev), not on" \
      "$stack: bash scripts/stacks.sh run sid ..." >&2
    exit 2
    ;;
esac
eval "$(bash "$here/modenv.sh")"
module=$dir/bin/$stack
mkdir -p "$module"
cp "$dir/go.mod" "$module/go.mod"
rm -f "$module/go.sum"
cd "$dir"
go mod edit -modfile="$module/go.mod" -require="github.com/idem-keys/idemhttp@$IDEMHTTP_VERSION"
go build -modfile="$module/go.mod" -o "$output" .
