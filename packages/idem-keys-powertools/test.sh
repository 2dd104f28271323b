#!/usr/bin/env bash
# idem-keys-powertools' own tests: the type hints (mypy --strict), then every test with the released Powertools
# decorators (pinned in requirements-test.txt) twice: on $DATABASE_URL_EXTENSION, a database with
# `CREATE EXTENSION idem_keys`, and on $DATABASE_URL_PORTABLE, one with the portable edition (made by the caller).
# The venv (.venv here) is made once per change of requirements-test.txt.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL_EXTENSION:?DATABASE_URL_EXTENSION must name a database with the idem_keys extension}"
: "${DATABASE_URL_PORTABLE:?DATABASE_URL_PORTABLE must name a database with the idem_keys portable edition}"
export DATABASE_URL_EXTENSION DATABASE_URL_PORTABLE
bash ../../scripts/python_venv.sh "idem-keys-powertools" .venv requirements-test.txt
export PYTHONDONTWRITEBYTECODE=1
.venv/bin/mypy --strict --cache-dir=/dev/null src/idem_keys_powertools  # no cache left in the tree
# -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (tests/conftest.py): it would hide a rule.
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
