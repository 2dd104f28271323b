#!/usr/bin/env bash
# Installs what the e2e suite needs on a fresh Debian 12 machine, and nothing that is already there, then builds
# the Go example. Idempotent: every step checks first. PostgreSQL and the extension itself come from
# scripts/setup.sh and `make install`.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Go 1.19 and pgx v4 come from Debian only (no module proxy here), so the Go example builds in GOPATH mode.
bash scripts/apt_install.sh "e2e setup" golang-go golang-github-jackc-pgx-v4-dev python3-venv

# Python: a venv from Debian's python3, filled from the pinned requirements once per change of them.
bash scripts/python_venv.sh "e2e setup" examples/python/.venv examples/python/requirements.txt

# Node: Debian's if there is none, then exactly the lockfile, once per change of it.
bash scripts/npm_ci.sh "e2e setup" examples/node

# Cached by Go after the first build, so this is cheap on every run.
GO111MODULE=off GOPATH=$(bash packages/idemhttp/gopath.sh) go build -o examples/go/bin/payments ./examples/go
