#!/usr/bin/env bash
# idem-keys-django's own tests, on the stack scripts/stacks.sh names in IDEM_STACK (host when unset), at that
# stack's end of the supported range: the host's Python 3.11 with Django 5.2 LTS and the other floors
# (requirements-test-floor.txt), trixie's Python 3.13 with Django 6.1 and the newest releases
# (requirements-test.txt). The type hints (mypy --strict, with django-stubs), then pytest with pytest-django against
# $DATABASE_URL (a database with idem_keys or its portable edition), with contract/ (the repository root's, or
# $IDEM_CONTRACT_DIR), on the package as a user installs it: idem-keys-core/install.sh builds the core's sdist and
# wheel and this package's, and installs those wheels into .venv-$IDEM_STACK here (the source tree is not on the
# path; tests/test_artefact.py checks). The venv is made once per change of its requirements.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
stack=${IDEM_STACK:-host}
case $stack in
  host) requirements=requirements-test-floor.txt ;;
  trixie) requirements=requirements-test.txt ;;
  *) echo "idem-keys-django: tested on host (Python 3.11) and trixie (Python 3.13), not $stack" >&2; exit 2 ;;
esac
bash ../../scripts/apt_install.sh idem-keys-django python3-venv
venv=.venv-$stack
bash ../../scripts/python_venv.sh idem-keys-django "$venv" "$requirements"
bash ../idem-keys-core/install.sh "$venv" .
export PYTHONDONTWRITEBYTECODE=1
"$venv/bin/mypy" --strict --cache-dir=/dev/null src/idem_keys_django # no cache left in the tree
# -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (tests/conftest.py): it would hide a rule.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
