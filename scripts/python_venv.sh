#!/usr/bin/env bash
# python_venv.sh WHO VENV REQUIREMENTS: a venv from Debian's python3 at VENV, filled from the pinned
# REQUIREMENTS once per change of them (the copy beside it says what was installed). Idempotent.
set -euo pipefail
who=$1 venv=$2 requirements=$3
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
if ! cmp -s "$requirements" "$venv/.installed-requirements"; then
  echo "$who: pip install -r $requirements"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/.installed-requirements"
fi
