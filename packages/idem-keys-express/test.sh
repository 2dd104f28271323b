#!/usr/bin/env bash
# The package's own tests on this stack's Node.js (node.sh: Node.js 18 on the host, Debian's 20.19 on trixie): the
# contract (keys, problems, SQL, fingerprints), the options, the body handling, every outcome against a real
# idem_keys on Express 5 and 4, and the packed tarball required and imported, with its types. DATABASE_URL names a
# database where the extension (or the portable edition) is installed. Dev dependencies come from the lockfile,
# installed once per change of it; they are plain JavaScript, so one node_modules serves every stack.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys installed}"
node_dir=$(bash node.sh)
bash ../../scripts/npm_ci.sh "idem-keys-express" . # npm runs on the machine's own node
echo "idem-keys-express: Node.js $("$node_dir/node" --version) (${IDEM_STACK:-host})"
"$node_dir/node" --test --test-reporter=spec test/*.test.js
