#!/usr/bin/env bash
# Installs and builds what the HTTP suite needs (each app's own setup.sh: Debian packages, venv, node_modules, the
# Go binary, the gem), only what is missing. Usage: setup.sh [go] [python] [node] [django] [rails] [rack] (default:
# all six).
set -euo pipefail
cd "$(dirname "$0")"
langs=("$@")
((${#langs[@]})) || langs=(go python node django rails rack)
for lang in "${langs[@]}"; do bash "apps/$lang/setup.sh"; done
