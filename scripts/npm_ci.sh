#!/usr/bin/env bash
# npm_ci.sh WHO DIR: Node.js and npm from Debian when the machine has no node at all (a machine may have its own,
# with its own npm, which Debian's would conflict with), then exactly DIR's lockfile, installed once per change
# of it (node_modules/.installed-lock remembers which). One install of DIR at a time (a lock on it): its tests on the
# host and in a Debian root share one node_modules.
set -euo pipefail
who=$1 dir=$2
exec {lock}<"$dir"
flock "$lock"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  bash "$(dirname "$0")/apt_install.sh" "$who" nodejs npm
fi
if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed-lock"; then
  echo "$who: npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$dir/package-lock.json" "$dir/node_modules/.installed-lock"
fi
