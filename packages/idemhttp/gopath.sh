#!/usr/bin/env bash
# Prints the GOPATH that builds idemhttp and its users in GOPATH mode, after making sure it exists:
#   GO111MODULE=off GOPATH=$(bash packages/idemhttp/gopath.sh) go build ./examples/go
# No Go module proxy is reachable here, so pgx v4 comes from Debian (/usr/share/gocode) and idemhttp from
# <repo>/.gopath, which holds one symlink back to this directory. Idempotent and quiet.
set -euo pipefail
pkg=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$pkg/../.." && pwd)
link=$root/.gopath/src/github.com/idem-keys/idemhttp
# Relative, so the tree still builds after the repository is moved or copied.
target=../../../../packages/idemhttp
if [ "$(readlink "$link" 2>/dev/null)" != "$target" ]; then
  mkdir -p "$(dirname "$link")"
  ln -sfn "$target" "$link"
fi
echo "$root/.gopath:/usr/share/gocode"
