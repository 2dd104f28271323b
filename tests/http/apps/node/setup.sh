#!/usr/bin/env bash
# Installs what the Node sample app needs on this stack ($IDEM_STACK), only what is missing: the stack's Node.js
# (packages/idem-keys-express/node.sh: 18 on the host, Debian's 20.19 and npm on trixie), then exactly the
# lockfile's packages, once per change of it (scripts/npm_ci.sh; plain JavaScript, so one node_modules serves every
# stack), then idem-keys-express from its `npm pack` tarball, as a user installs it (scripts/install_npm_pack.sh).
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash packages/idem-keys-express/node.sh >/dev/null
bash scripts/npm_ci.sh "http setup (node)" tests/http/apps/node
bash scripts/install_npm_pack.sh packages/idem-keys-express tests/http/apps/node >/dev/null
