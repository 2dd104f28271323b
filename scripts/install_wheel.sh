#!/usr/bin/env bash
# install_wheel.sh PACKAGE_DIR VENV: builds the Python package in PACKAGE_DIR as a registry would serve it and
# installs that artefact into VENV, a virtualenv that already holds the pinned dependencies (its caller's
# requirements file): `python -m build` makes the sdist, then the wheel from that sdist (into PACKAGE_DIR/dist), and
# pip installs the wheel, never the source tree. Builds once per change of the package's files (their hash is kept
# in dist/), installs once per new wheel (its hash is kept in VENV). The build's isolated environment gets its
# backend (hatchling) from PyPI. Several runs may build one package at once (its tests on the host and in a Debian
# root, a sample app's setup): one at a time, a lock on PACKAGE_DIR.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "${1:?usage: install_wheel.sh PACKAGE_DIR VENV}" && pwd)
venv=$(cd "${2:?usage: install_wheel.sh PACKAGE_DIR VENV}" && pwd)
cd "$dir"
exec {lock}<"$dir"
flock "$lock"
name=$(sed -n 's/^name = "\(.*\)"$/\1/p' pyproject.toml)
[ -n "$name" ] || { echo "install_wheel.sh: no name in $dir/pyproject.toml" >&2; exit 1; }
hash=$(bash "$scripts/tree_hash.sh" . './dist/*' './.venv*' '*/__pycache__/*' './.mypy_cache/*')
if [ "$(cat dist/.source-sha256 2>/dev/null)" != "$hash" ] || ! compgen -G "dist/*.whl" >/dev/null; then
  build_venv=.venv-build-${IDEM_STACK:-host} # the stack's own Python (scripts/stacks.sh)
  [ -x "$build_venv/bin/python" ] || /usr/bin/python3 -m venv "$build_venv"
  "$build_venv/bin/pip" install -q --disable-pip-version-check build==1.6.1
  rm -rf dist
  # Without --sdist or --wheel, build makes the sdist first and the wheel from it: what pip does with an sdist.
  log=$(mktemp)
  PYTHONDONTWRITEBYTECODE=1 "$build_venv/bin/python" -m build --outdir dist . >"$log" 2>&1 || { cat "$log"; exit 1; }
  rm -f "$log"
  echo "$hash" >dist/.source-sha256
  echo "$name: built $(cd dist && echo *.tar.gz *.whl)"
fi
wheel=$(compgen -G "dist/*.whl")
wheel_hash=$(sha256sum "$wheel" | cut -d' ' -f1)
marker="$venv/.$name-wheel"
if [ "$(cat "$marker" 2>/dev/null)" != "$wheel_hash" ]; then
  "$venv/bin/pip" uninstall -q -y --disable-pip-version-check "$name" 2>/dev/null || true
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "$wheel"
  "$venv/bin/pip" check --disable-pip-version-check >/dev/null # what the wheel requires is what VENV holds
  echo "$wheel_hash" >"$marker"
  echo "$name: installed $(basename "$wheel") into $venv"
fi
