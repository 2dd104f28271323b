#!/usr/bin/env bash
# Installs what the Node sample app needs, only what is missing: Node.js and npm from Debian when there is no
# node at all (a machine may have its own, with its own npm, which Debian's would conflict with), then exactly
# the lockfile's packages, once per change of it. idem-keys-express comes from packages/ as a link.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  bash ../../../../scripts/apt_install.sh "http setup (node)" nodejs npm
fi
if ! cmp -s package-lock.json node_modules/.installed-lock; then
  echo "http setup (node): npm ci in tests/http/apps/node"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi
