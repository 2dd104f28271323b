#!/usr/bin/env bash
# The Django sample app's venv on the stack scripts/stacks.sh names in IDEM_STACK (host when unset):
# .venv-$IDEM_STACK from requirements-$IDEM_STACK.txt (host: Python 3.11, Django 5.2 LTS and the benchmark's peer;
# trixie: Python 3.13, Django 6.1). Django, gunicorn and psycopg pinned; idem-keys-django and idem-keys-core
# installed from their built wheels (packages/idem-keys-core/install.sh: each built from its sdist), as a user
# installs them. Idempotent, and quick when nothing changed since the last run.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
stack=${IDEM_STACK:-host}
case $stack in
  host | trixie) ;;
  *) echo "http django: runs on host and trixie, not $stack" >&2; exit 2 ;;
esac
bash scripts/apt_install.sh "http django" python3-venv
venv=tests/http/apps/django/.venv-$stack
bash scripts/python_venv.sh "http django" "$venv" "tests/http/apps/django/requirements-$stack.txt"
bash packages/idem-keys-core/install.sh "$venv" packages/idem-keys-django
