#!/usr/bin/env bash
# serve.sh PORT: the Django sample app on 127.0.0.1:PORT in the foreground: gunicorn, one gthread worker of 16
# threads (exec: the caller's pid is gunicorn's master, and its command line names tests/http, which run.sh's
# clean-up looks for). gunicorn.conf.py makes the worker die with the master, so a SIGKILL of this pid kills the
# request in flight, as the suite's crash checks need. The venv is the stack's in IDEM_STACK (host when unset;
# setup.sh makes it). DATABASE_URL, IDEM_LEASE, IDEM_WAIT, IDEM_OFF, IDEM_TX and the benchmark's IDEM_PEER:
# payments/settings.py.
set -euo pipefail
port=${1:?usage: serve.sh PORT}
here=$(cd "$(dirname "$0")" && pwd)
venv=$here/.venv-${IDEM_STACK:-host}
[ -x "$venv/bin/gunicorn" ] || {
  echo "serve.sh: no $venv: run tests/http/setup.sh django@${IDEM_STACK:-host}" >&2
  exit 1
}
export PYTHONDONTWRITEBYTECODE=1
# A short graceful shutdown: the suite's SIGTERM should not wait out a view sleeping for a minute.
exec "$venv/bin/gunicorn" --config "$here/gunicorn.conf.py" --chdir "$here" --bind "127.0.0.1:$port" \
  --worker-class gthread --workers 1 --threads 16 --graceful-timeout 2 payments.wsgi:application
