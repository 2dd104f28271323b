#!/usr/bin/env bash
# idemhttp's tests: gofmt here, then go vet and go test (with the race detector where it can run) on the package
# as a Go user downloads it (its module zip, unpacked into a GOPATH by gopath.sh), against $DATABASE_URL, a database
# where idem_keys is installed (the extension or the portable edition).
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys installed}"
export GO111MODULE=off GOPATH
GOPATH=$(bash gopath.sh)
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "idemhttp: not gofmt-formatted: $unformatted" >&2
  exit 1
fi
go vet github.com/idem-keys/idemhttp
# The race detector needs cgo and a C compiler; without them the same tests run without it.
race=()
if [ "$(go env CGO_ENABLED)" = 1 ] && command -v "$(go env CC)" >/dev/null; then race=(-race); fi
go test -count=1 "${race[@]}" github.com/idem-keys/idemhttp
