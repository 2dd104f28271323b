#!/usr/bin/env bash
# The Python sample app's venv on the stack scripts/stacks.sh names in IDEM_STACK (host when unset):
# .venv-$IDEM_STACK from requirements-$IDEM_STACK.txt (host: Python 3.11; trixie: Python 3.13). Starlette, uvicorn
# and psycopg pinned; idem-keys-asgi and idem-keys-core installed from their built wheels
# (packages/idem-keys-core/install.sh). Idempotent, and quick when nothing changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
stack=${IDEM_STACK:-host}
case $stack in
  host | trixie) ;;
  *) echo "http python: runs on host and trixie, not $stack" >&2; exit 2 ;;
esac
bash scripts/apt_install.sh "http python" python3-venv
venv=tests/http/apps/python/.venv-$stack
bash scripts/python_venv.sh "http python" "$venv" "tests/http/apps/python/requirements-$stack.txt"
bash packages/idem-keys-core/install.sh "$venv" packages/idem-keys-asgi
