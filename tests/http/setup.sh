#!/usr/bin/env bash
# Installs and builds what the HTTP suite needs (each app's own setup.sh: Debian packages, venv, node_modules, the
# Go binary, the gem), only what is missing. Usage: setup.sh [go] [python] [node] [rails]
# [django] (default: go python node; django and rails are run by name while their apps settle).
set -euo pipefail
cd "$(dirname "$0")"
langs=("$@")
((${#langs[@]})) || langs=(go python node)
for lang in "${langs[@]}"; do bash "apps/$lang/setup.sh"; done
