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
exec bash ../idem-keys-core/test_package.sh . idem_keys_django "$@"
