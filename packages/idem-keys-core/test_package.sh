#!/usr/bin/env bash
# test_package.sh PACKAGE_DIR MODULE [PYTEST_ARG...]: the Python packages' tests, the same way for each (the core,
# idem-keys-asgi, idem-keys-django; their test.sh say what they test), on the stack scripts/stacks.sh names in
# IDEM_STACK (host when unset), at that stack's end of the supported range: the host's Python 3.11 with the floors
# of every range (PACKAGE_DIR/requirements-test-floor.txt, when the package pins floors), trixie's Python 3.13 with
# the newest releases (requirements-test.txt). The venv (.venv-$IDEM_STACK in PACKAGE_DIR) is made once per change
# of its requirements; the core's wheel and the package's, each built from its sdist, are installed into it (the
# tests run those, not src/); then the type hints (mypy --strict on src/MODULE) and pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "${1:?usage: test_package.sh PACKAGE_DIR MODULE [PYTEST_ARG...]}"
module=${2:?usage: test_package.sh PACKAGE_DIR MODULE [PYTEST_ARG...]}
shift 2
name=$(basename "$PWD")
stack=${IDEM_STACK:-host}
requirements=requirements-test.txt
case $stack in
  host) [ ! -f requirements-test-floor.txt ] || requirements=requirements-test-floor.txt ;;
  trixie) ;;
  *) echo "$name: tested on host (Python 3.11) and trixie (Python 3.13), not $stack" >&2; exit 2 ;;
esac
bash "$here/../../scripts/apt_install.sh" "$name" python3-venv
venv=.venv-$stack
bash "$here/../../scripts/python_venv.sh" "$name" "$venv" "$requirements"
if [ "$PWD" = "$here" ]; then bash "$here/install.sh" "$venv"; else bash "$here/install.sh" "$venv" .; fi
export PYTHONDONTWRITEBYTECODE=1
"$venv/bin/mypy" --strict --cache-dir=/dev/null "src/$module" # no cache left in the tree
# -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (no_skips.py): it would hide a rule.
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
