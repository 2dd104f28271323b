#!/usr/bin/env bash
# Builds the Go sample app into tests/http/apps/go/bin/$IDEM_STACK/app on the stack in $IDEM_STACK, after installing
# Go and pgx v5 from Debian if they are missing. idemhttp needs pgx v5, which Debian ships in sid only: run it as go@sid
# (tests/http/setup.sh go@sid). Module mode with no network: idemhttp from its artefact and pgx from Debian's sources,
# both through file module proxies (packages/idemhttp/modenv.sh); the app's go.mod is copied beside the binary and
# made to require that idemhttp, so the checkout is left as it is. Idempotent; Go's build cache makes a rebuild with
# nothing changed take a moment.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
stack=${IDEM_STACK:-host}
case $stack in
  sid) bash scripts/apt_install.sh "http go" golang-go golang-github-jackc-pgx-v5-dev git ;;
  *)
    echo "tests/http/apps/go: idemhttp needs pgx v5, which Debian ships in sid only (golang-github-jackc-pgx-v5-dev)," \
      "not on $stack: use go@sid" >&2
    exit 2
    ;;
esac
eval "$(bash packages/idemhttp/modenv.sh)"
build=$PWD/tests/http/apps/go/bin/$stack
mkdir -p "$build"
cp tests/http/apps/go/go.mod "$build/go.mod"
rm -f "$build/go.sum"
cd tests/http/apps/go
go mod edit -modfile="$build/go.mod" -require="github.com/idem-keys/idemhttp@$IDEMHTTP_VERSION"
go build -modfile="$build/go.mod" -o "$build/app" .
