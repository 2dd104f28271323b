#!/usr/bin/env bash
# The Django sample app's venv (.venv here): Django, gunicorn and psycopg pinned (requirements.txt), and
# idem-keys-django installed from its built artefact (scripts/install_wheel.sh: the wheel built from
# its sdist), as a user installs it. Idempotent, and quick when nothing changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/apt_install.sh "http django" python3-venv
bash scripts/python_venv.sh "http django" tests/http/apps/django/.venv tests/http/apps/django/requirements.txt
bash scripts/install_wheel.sh packages/idem-keys-django tests/http/apps/django/.venv
