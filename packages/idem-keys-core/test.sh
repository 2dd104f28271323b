#!/usr/bin/env bash
# idem-keys-core's own tests, on the stack scripts/stacks.sh names in IDEM_STACK (host when unset): both ends of
# its range are the host's Python 3.11 and trixie's Python 3.13. The type hints (mypy --strict), then the tests:
# the contract (contract/ at the repository root, or $IDEM_CONTRACT_DIR: keys, problems, SQL), the fingerprint's
# statements, the COMMIT classifier, the options, on the package as a user installs it (its wheel, built from its
# sdist). No database. The venv (.venv-$IDEM_STACK here) is made once per change of requirements-test.txt.
set -euo pipefail
cd "$(dirname "$0")"
exec bash test_package.sh . idem_keys_core "$@"
