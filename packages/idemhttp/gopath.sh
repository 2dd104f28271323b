#!/usr/bin/env bash
# Prints the GOPATH that builds idemhttp's users in GOPATH mode, after making sure it holds this package as a Go
# user downloads it:
#   GO111MODULE=off GOPATH=$(bash packages/idemhttp/gopath.sh) go build ./examples/go
# The artefact is the module as a module proxy serves it (dist/github.com/idem-keys/idemhttp/@v/vX.Y.Z.zip, .mod
# and .info: the layout GOPROXY=file://… reads, made from this directory with its version from doc.go), unpacked
# into <repo>/.gopath/src/github.com/idem-keys/idemhttp. No Go module proxy is reachable here, so pgx v4 comes from
# Debian (/usr/share/gocode). Remade once per change of this directory's files; quiet.
set -euo pipefail
pkg=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$pkg/../.." && pwd)
module=$(sed -n 's/^module //p' "$pkg/go.mod")
version=v$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$pkg/doc.go")
[ "$version" != v ] || { echo "gopath.sh: no Version in $pkg/doc.go" >&2; exit 1; }
proxy=$pkg/dist/$module/@v
target=$root/.gopath/src/$module
hash=$(bash "$root/scripts/tree_hash.sh" "$pkg" './dist/*')
if [ "$(cat "$pkg/dist/.source-sha256" 2>/dev/null)" != "$hash" ] || [ ! -f "$target/go.mod" ]; then
  rm -rf "$pkg/dist" "$target"
  mkdir -p "$proxy" "$target"
  # A module zip: every file under module@version/, with a fixed time so the same files give the same zip.
  python3 - "$pkg" "$proxy/$version.zip" "$module@$version" <<'PY'
import os, sys, zipfile
src, out, prefix = sys.argv[1:]
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if os.path.join(dirpath, d) != os.path.join(src, "dist"))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            info = zipfile.ZipInfo(f"{prefix}/{os.path.relpath(path, src)}", (1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with open(path, "rb") as f:
                z.writestr(info, f.read(), zipfile.ZIP_DEFLATED)
PY
  cp "$pkg/go.mod" "$proxy/$version.mod"
  printf '{"Version":"%s"}\n' "$version" >"$proxy/$version.info"
  echo "$version" >"$proxy/list"
  (cd "$target" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$proxy/$version.zip" \
    && mv "$module@$version"/* . && rm -rf "${module%%/*}")
  echo "$hash" >"$pkg/dist/.source-sha256"
fi
echo "$root/.gopath:/usr/share/gocode"
