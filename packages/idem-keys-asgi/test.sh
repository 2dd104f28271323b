#!/usr/bin/env bash
# idem-keys-asgi's own tests: the type hints (mypy --strict), the key parser and problem bodies, then the
# middleware on Starlette and FastAPI apps in-process (httpx's ASGI transport) against $DATABASE_URL, a database
# with idem_keys or its portable edition, on the package as a user installs it (its wheel, built from its sdist).
# The venv (.venv here) is made once per change of requirements-test.txt.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
bash ../../scripts/python_venv.sh "idem-keys-asgi" .venv requirements-test.txt
bash ../../scripts/install_wheel.sh . .venv # the sdist, the wheel from it, installed: the tests run that, not src/
export PYTHONDONTWRITEBYTECODE=1
.venv/bin/mypy --strict --cache-dir=/dev/null src/idem_keys_asgi  # no cache left in the tree
# -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (tests/conftest.py): it would hide a rule.
.venv/bin/python -m pytest -q -p no:cacheprovider tests
