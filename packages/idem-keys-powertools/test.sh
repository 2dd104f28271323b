#!/usr/bin/env bash
# idem-keys-powertools' own tests: the type hints (mypy --strict), then every test with the released Powertools
# decorators twice: on $DATABASE_URL_EXTENSION, a database with `CREATE EXTENSION idem_keys`, and on
# $DATABASE_URL_PORTABLE, one with the portable edition (made by the caller). All of that on the ends of the
# ranges in pyproject.toml that this stack ($IDEM_STACK, scripts/stacks.sh) holds:
#   host    Python 3.11 (the floor of Python's range), with Powertools' floor (requirements-test-floor.txt) and its
#           newest release (requirements-test.txt)
#   trixie  Python 3.13 (the newest end of Python's range), with Powertools' newest release
# Each venv is the stack's own (.venv-STACK, .venv-floor-STACK), made once per change of its requirements file.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL_EXTENSION:?DATABASE_URL_EXTENSION must name a database with the idem_keys extension}"
: "${DATABASE_URL_PORTABLE:?DATABASE_URL_PORTABLE must name a database with the idem_keys portable edition}"
export DATABASE_URL_EXTENSION DATABASE_URL_PORTABLE
export PYTHONDONTWRITEBYTECODE=1
floor=$(sed -n 's/.*"aws-lambda-powertools>=\([0-9.]*\),.*/\1/p' pyproject.toml)
pinned=$(sed -n 's/^aws-lambda-powertools==//p' requirements-test-floor.txt)
if [ "$floor" != "$pinned" ]; then
  echo "idem-keys-powertools: pyproject.toml's range starts at $floor, requirements-test-floor.txt pins $pinned" >&2
  exit 1
fi
stack=${IDEM_STACK:-host}
case $stack in
  host) ends=(newest floor) ;;
  trixie) ends=(newest) ;;
  *) echo "idem-keys-powertools: tested on the host and on trixie, not on '$stack'" >&2; exit 2 ;;
esac
bash ../../scripts/apt_install.sh idem-keys-powertools python3-venv # a root has no venv module of its own
for end in "${ends[@]}"; do
  if [ "$end" = newest ]; then venv=.venv-$stack requirements=requirements-test.txt
  else venv=.venv-floor-$stack requirements=requirements-test-floor.txt; fi
  started=$SECONDS
  bash ../../scripts/python_venv.sh "idem-keys-powertools" "$venv" "$requirements"
  bash ../../scripts/install_wheel.sh . "$venv" # its wheel, built from its sdist: the tests run that, not src/
  echo "idem-keys-powertools: Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'),"\
    "Powertools $("$venv/bin/python" -c 'from importlib.metadata import version; print(version("aws-lambda-powertools"))') ($end of its range, $stack)"
  "$venv/bin/mypy" --strict --cache-dir=/dev/null src/idem_keys_powertools  # no cache left in the tree
  # -p no:cacheprovider: no .pytest_cache in the tree. A skip fails (tests/conftest.py): it would hide a rule.
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
  echo "idem-keys-powertools: Powertools, $end of its range, on $stack: ok in $((SECONDS - started)) s"
done
