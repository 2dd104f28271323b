#!/usr/bin/env bash
# idem-keys-asgi's own tests, on the stack scripts/stacks.sh names in IDEM_STACK (host when unset), at that stack's
# end of the supported range: the host's Python 3.11 with the floors of every range (requirements-test-floor.txt),
# trixie's Python 3.13 with the newest releases (requirements-test.txt). The type hints (mypy --strict), then the
# middleware on Starlette and FastAPI apps in-process (httpx's ASGI transport) against $DATABASE_URL, a database
# with idem_keys or its portable edition, with contract/ (the repository root's, or $IDEM_CONTRACT_DIR), on the
# package as a user installs it (its wheel and idem-keys-core's, each built from its sdist). The venv
# (.venv-$IDEM_STACK here) is made once per change of its requirements.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
exec bash ../idem-keys-core/test_package.sh . idem_keys_asgi "$@"
