#!/usr/bin/env bash
# Builds the Go sample app into tests/http/apps/go/bin/app, after installing Go 1.19 and pgx v4 from Debian if
# they are missing (no module proxy here: GOPATH mode, idemhttp through packages/idemhttp/gopath.sh).
# Idempotent; Go's build cache makes a rebuild with nothing changed take a moment.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/apt_install.sh "http go" golang-go golang-github-jackc-pgx-v4-dev
GO111MODULE=off GOPATH=$(bash packages/idemhttp/gopath.sh) go build -o tests/http/apps/go/bin/app ./tests/http/apps/go
