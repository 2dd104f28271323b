#!/usr/bin/env bash
# Builds the Go example into examples/go/bin/payments, on the stack in $IDEM_STACK, after installing Go and pgx v5
# from Debian if they are missing. idemhttp needs pgx v5, which Debian ships in sid only, so from the repository root:
#   bash scripts/stacks.sh run sid bash examples/go/build.sh
# The binary is static (no cgo), so it runs on the host, beside `make demo`'s server or under the e2e suite. Module
# mode with no network: idemhttp from its artefact and pgx from Debian's sources, both through file module proxies
# (packages/idemhttp/modenv.sh); the example's go.mod is copied into bin/$IDEM_STACK and made to require that
# idemhttp, so the checkout is left as it is. Idempotent; Go's build cache makes a rebuild with nothing changed cheap.
set -euo pipefail
cd "$(dirname "$0")/../.."
stack=${IDEM_STACK:-host}
case $stack in
  sid) bash scripts/apt_install.sh "go example" golang-go golang-github-jackc-pgx-v5-dev git ;;
  *)
    echo "examples/go: idemhttp needs pgx v5, which Debian ships in sid only (golang-github-jackc-pgx-v5-dev), not" \
      "on $stack: bash scripts/stacks.sh run sid bash examples/go/build.sh" >&2
    exit 2
    ;;
esac
eval "$(bash packages/idemhttp/modenv.sh)"
module=$PWD/examples/go/bin/$stack
mkdir -p "$module"
cp examples/go/go.mod "$module/go.mod"
rm -f "$module/go.sum"
cd examples/go
go mod edit -modfile="$module/go.mod" -require="github.com/idem-keys/idemhttp@$IDEMHTTP_VERSION"
CGO_ENABLED=0 go build -modfile="$module/go.mod" -o bin/payments .
