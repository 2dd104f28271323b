#!/usr/bin/env bash
# The package's own tests: the key parser, the problem bodies, the options, the body handling, the types, and
# every outcome against a real idem_keys on Express 5 and 4. DATABASE_URL names a database where the extension
# (or the portable edition) is installed. Dev dependencies come from the lockfile, installed once per change of it.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys installed}"
bash ../../scripts/npm_ci.sh "idem-keys-express" . # Debian's Node.js if there is none, then the lockfile
npm test --silent
