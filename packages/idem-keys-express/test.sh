#!/usr/bin/env bash
# The package's own tests: the key parser, the problem bodies, the options, the body handling, the types, and
# every outcome against a real idem_keys on Express 5 and 4. DATABASE_URL names a database where the extension
# (or the portable edition) is installed. Dev dependencies come from the lockfile, installed once per change of it.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys installed}"
command -v npm >/dev/null || { echo "idem-keys-express: node and npm are needed (tests/http/apps/node/setup.sh installs them)" >&2; exit 1; }

if ! cmp -s package-lock.json node_modules/.installed-lock; then
  echo "idem-keys-express: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.installed-lock
fi
npm test --silent
