#!/usr/bin/env bash
# Installs what the e2e suite needs on a fresh Debian 12 machine, and nothing that is already there, then builds
# the Go example. Idempotent: every step checks first. PostgreSQL and the extension itself come from
# scripts/setup.sh and `make install`.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/apt_install.sh "e2e setup" python3-venv

# Python: a venv from Debian's python3, filled from the pinned requirements once per change of them.
bash scripts/python_venv.sh "e2e setup" examples/python/.venv examples/python/requirements.txt

# Node: Debian's if there is none, then exactly the lockfile, once per change of it.
bash scripts/npm_ci.sh "e2e setup" examples/node

# Go: idemhttp needs pgx v5, which Debian ships in sid only, so the example is built in the sid root (Go and pgx v5
# installed there if missing), as a static binary that runs here: examples/go/bin/payments. Cached by Go after the
# first build, so this is cheap on every run.
bash scripts/stacks.sh run sid bash examples/go/build.sh
