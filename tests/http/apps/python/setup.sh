#!/usr/bin/env bash
# The Python sample app's venv (.venv here): Starlette, uvicorn and psycopg pinned, idem-keys-asgi installed from
# its built wheel (scripts/install_wheel.sh). Idempotent, and quick when requirements.txt has not changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/apt_install.sh "http python" python3-venv
bash scripts/python_venv.sh "http python" tests/http/apps/python/.venv tests/http/apps/python/requirements.txt
bash scripts/install_wheel.sh packages/idem-keys-asgi tests/http/apps/python/.venv
