#!/usr/bin/env bash
# idem-keys-django's own tests: the type hints (mypy --strict, with django-stubs), then pytest with pytest-django
# against $DATABASE_URL (a database with idem_keys or its portable edition), on the package as a user installs
# it: scripts/install_wheel.sh builds the sdist and the wheel from it, and installs that wheel into .venv here (the source tree
# is not on the path; tests/test_artefact.py checks). The venv is made once per change of requirements-test.txt.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
bash ../../scripts/python_venv.sh "idem-keys-django" .venv requirements-test.txt
bash ../../scripts/install_wheel.sh . .venv
export PYTHONDONTWRITEBYTECODE=1
.venv/bin/mypy --strict --cache-dir=/dev/null src/idem_keys_django  # no cache left in the tree
# -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (tests/conftest.py): it would hide a rule.
.venv/bin/python -m pytest -q -p no:cacheprovider tests "$@"
