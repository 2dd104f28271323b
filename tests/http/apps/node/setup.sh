#!/usr/bin/env bash
# Installs what the Node sample app needs, only what is missing: Node.js and npm from Debian when there is no
# node at all, then exactly the lockfile's packages, once per change of it (scripts/npm_ci.sh), then
# idem-keys-express from its `npm pack` tarball, as a user installs it (scripts/install_npm_pack.sh).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/npm_ci.sh "http setup (node)" tests/http/apps/node
bash scripts/install_npm_pack.sh packages/idem-keys-express tests/http/apps/node >/dev/null
