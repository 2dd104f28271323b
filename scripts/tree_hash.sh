#!/usr/bin/env bash
# tree_hash.sh DIR [EXCLUDED ...]: one SHA-256 over the names and contents of every file under DIR, except the
# paths (relative, as `find .` prints them: './dist/*') that match an EXCLUDED pattern. The build scripts keep it
# beside an artefact to rebuild that artefact once per change of its sources.
set -euo pipefail
cd "${1:?usage: tree_hash.sh DIR [EXCLUDED ...]}"
shift
prune=()
for pattern in "$@"; do prune+=(! -path "$pattern"); done
find . -type f "${prune[@]}" | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1
