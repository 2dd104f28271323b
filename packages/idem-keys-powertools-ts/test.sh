#!/usr/bin/env bash
# idem-keys-powertools' own tests: the layer under Powertools' own makeIdempotent, idempotent decorator and Middy
# middleware, every test on a database with the idem_keys extension AND on one with the portable edition (two
# databases the caller makes), then the types. Dev dependencies come from the lockfile, installed once per change
# of it. A skipped or todo test fails the run: it would hide a case.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL_EXTENSION:?DATABASE_URL_EXTENSION must name a database with CREATE EXTENSION idem_keys done}"
: "${DATABASE_URL_PORTABLE:?DATABASE_URL_PORTABLE must name a database with the portable edition installed (docs/portable.md)}"
bash ../../scripts/npm_ci.sh "idem-keys-powertools" . # Debian's Node.js if there is none, then the lockfile
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
  || { echo "idem-keys-powertools: node 18 or later is needed, not $(node --version)" >&2; exit 1; }

tap=$(mktemp)
trap 'rm -f "$tap"' EXIT
for edition in extension portable; do
  if [ "$edition" = extension ]; then url=$DATABASE_URL_EXTENSION; else url=$DATABASE_URL_PORTABLE; fi
  echo "idem-keys-powertools: every test on the $edition"
  DATABASE_URL=$url IDEM_EDITION=$edition node --test \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$tap" test/*.test.js
  if ! grep -q '^# skipped 0$' "$tap" || ! grep -q '^# todo 0$' "$tap"; then
    echo "idem-keys-powertools: a test was skipped or left todo on the $edition" >&2
    exit 1
  fi
done
echo "idem-keys-powertools: types"
npm run --silent test:types
