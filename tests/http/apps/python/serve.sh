#!/usr/bin/env bash
# serve.sh PORT: the Python sample app on 127.0.0.1:PORT in the foreground, one uvicorn worker (exec: the caller's
# pid is the server's, so the suite can SIGKILL it), from the venv of the stack in IDEM_STACK (host when unset;
# setup.sh makes it). DATABASE_URL, IDEM_LEASE, IDEM_WAIT, IDEM_OFF, IDEM_TX: app.py.
set -euo pipefail
port=${1:?usage: serve.sh PORT}
here=$(cd "$(dirname "$0")" && pwd)
venv=$here/.venv-${IDEM_STACK:-host}
[ -x "$venv/bin/uvicorn" ] || {
  echo "serve.sh: no $venv: run tests/http/setup.sh python@${IDEM_STACK:-host}" >&2
  exit 1
}
# A short graceful shutdown: the suite's SIGTERM should not wait out a handler sleeping for a minute.
exec "$venv/bin/uvicorn" --app-dir "$here" app:app --host 127.0.0.1 --port "$port" --workers 1 \
  --no-access-log --timeout-graceful-shutdown 2
