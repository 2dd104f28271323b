#!/usr/bin/env bash
# Installs what the e2e suite needs on a fresh Debian 12 machine, and nothing that is already there, then builds
# the Go example. Idempotent: every step checks first. PostgreSQL and the extension itself come from
# scripts/setup.sh and `make install`.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Go 1.19 and pgx v4 come from Debian only (no module proxy here), so the Go example builds in GOPATH mode.
need_pkgs=(golang-go golang-github-jackc-pgx-v4-dev python3-venv)
# A machine may already have Node.js from elsewhere (with its own npm); Debian's npm would conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then need_pkgs+=(nodejs npm); fi
bash scripts/apt_install.sh "e2e setup" "${need_pkgs[@]}"

# Python: a venv from Debian's python3, filled from the pinned requirements once per change of them.
bash scripts/python_venv.sh "e2e setup" examples/python/.venv examples/python/requirements.txt

# Node: exactly the lockfile, once per change of it.
if ! cmp -s examples/node/package-lock.json examples/node/node_modules/.installed-lock; then
  echo "e2e setup: npm ci in examples/node"
  (cd examples/node && npm ci --no-audit --no-fund --loglevel=error)
  cp examples/node/package-lock.json examples/node/node_modules/.installed-lock
fi

# Cached by Go after the first build, so this is cheap on every run.
GO111MODULE=off GOPATH=$(bash packages/idemhttp/gopath.sh) go build -o examples/go/bin/payments ./examples/go
