#!/usr/bin/env bash
# Installs what the Node sample app needs, only what is missing: Node.js and npm from Debian when there is no
# node at all, then exactly the lockfile's packages, once per change of it (scripts/npm_ci.sh).
# idem-keys-express comes from packages/ as a link.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/npm_ci.sh "http setup (node)" tests/http/apps/node
