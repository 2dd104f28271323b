#!/usr/bin/env bash
# Installs and builds what the HTTP suite needs (each app's own setup.sh: Debian packages, venv, node_modules, the
# Go binary, the gem), only what is missing, on each app's stack (scripts/stacks.sh).
# Usage: setup.sh [APP[@STACK]]...: an app with a stack, that one; an app alone, both of its ends
# (tests/http/matrix.sh); nothing, every app at both ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/http/matrix.sh
apps=()
if (($#)); then
  for app in "$@"; do
    if [[ $app == *@* ]]; then apps+=("$app"); else mapfile -t -O "${#apps[@]}" apps < <(matrix_apps "$app"); fi
  done
else
  mapfile -t apps < <(matrix_apps)
fi
for app in "${apps[@]}"; do
  bash scripts/stacks.sh run "${app#*@}" bash "tests/http/apps/${app%%@*}/setup.sh"
done
