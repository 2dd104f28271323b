#!/usr/bin/env bash
# idem-keys-core's own tests, on the stack scripts/stacks.sh names in IDEM_STACK (host when unset): both ends of
# its range are the host's Python 3.11 and trixie's Python 3.13. The type hints (mypy --strict), then the tests:
# the contract (contract/ at the repository root, or $IDEM_CONTRACT_DIR: keys, problems, SQL), the fingerprint's
# statements, the COMMIT classifier, the options, on the package as a user installs it (its wheel, built from its
# sdist). No database. The venv (.venv-$IDEM_STACK here) is made once per change of requirements-test.txt.
set -euo pipefail
cd "$(dirname "$0")"
stack=${IDEM_STACK:-host}
case $stack in
  host | trixie) ;;
  *) echo "idem-keys-core: tested on host (Python 3.11) and trixie (Python 3.13), not $stack" >&2; exit 2 ;;
esac
bash ../../scripts/apt_install.sh idem-keys-core python3-venv
venv=.venv-$stack
bash ../../scripts/python_venv.sh idem-keys-core "$venv" requirements-test.txt
bash install.sh "$venv" # the sdist, the wheel from it, installed: the tests run that, not src/
export PYTHONDONTWRITEBYTECODE=1
"$venv/bin/mypy" --strict --cache-dir=/dev/null src/idem_keys_core # no cache left in the tree
# -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (tests/conftest.py): it would hide a rule.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
