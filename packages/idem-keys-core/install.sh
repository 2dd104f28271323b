#!/usr/bin/env bash
# install.sh VENV [PACKAGE_DIR...]: installs idem-keys-core's wheel into VENV, then the wheel of each PACKAGE_DIR
# (idem-keys-asgi, idem-keys-django: they depend on it), each built from its sdist as a registry would serve it
# (scripts/install_wheel.sh). VENV already holds the pinned dependencies (its caller's requirements file).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:?usage: install.sh VENV [PACKAGE_DIR...]}; shift
for dir in "$here" "$@"; do
  bash "$here/../../scripts/install_wheel.sh" "$dir" "$venv"
done
