#!/usr/bin/env bash
# modenv.sh [VERSION]: prints, as `export` lines for eval, the environment in which `go` builds idemhttp's users in
# module mode with no network, on the stack in $IDEM_STACK:
#   eval "$(bash packages/idemhttp/modenv.sh)"
#   go mod edit -require=github.com/idem-keys/idemhttp@$IDEMHTTP_VERSION && go build ./...
# GOPROXY lists two file proxies: idemhttp's artefact (dist.sh, VERSION or the checkout's), then a proxy made from
# Debian's Go sources (/usr/share/gocode/src), each module served under the version that a go.mod asks for. No checksum
# database (GOSUMDB=off: Debian's sources are not the zips it vouches for), no toolchain download (GOTOOLCHAIN=local),
# go.mod and go.sum updated as needed (-mod=mod: build with -modfile outside the checkout). The proxy and the module
# cache live in .go-$IDEM_STACK here, one per stack; the cache forgets idemhttp whenever its artefact changes (a
# version in the cache is never fetched again), and everything when Debian's sources change. Quiet.
set -euo pipefail
pkg=$(cd "$(dirname "$0")" && pwd)
stack=${IDEM_STACK:-host}
gocode=/usr/share/gocode/src
[ -d "$gocode" ] || { echo "idemhttp modenv.sh: no Debian Go sources in $gocode on $stack" >&2; exit 1; }
version=$(bash "$pkg/dist.sh" "$@")
module=$(sed -n 's/^module //p' "$pkg/go.mod")
state=$pkg/.go-$stack proxy=$pkg/.go-$stack/proxy cache=$pkg/.go-$stack/mod
mkdir -p "$state"

# The Debian proxy, remade when idemhttp's requirements, Debian's Go packages or this script change; the cache goes
# with it.
sources=$( (cat "$pkg/go.mod" "$pkg/modenv.sh"; dpkg-query -W -f '${Package} ${Version}\n' 'golang-*' 2>/dev/null) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$state/proxy.stamp" 2>/dev/null)" != "$sources" ]; then
  chmod -R u+w "$cache" 2>/dev/null || true
  rm -rf "$proxy" "$cache" "$state/dist.stamp"
  python3 - "$gocode" "$proxy" "$pkg/go.mod" <<'PY'
import json, os, re, sys, zipfile
gocode, proxy, start = sys.argv[1:]

def requirements(text):
    """The (module, version) pairs a go.mod requires."""
    text = re.sub(r"//.*", "", text)
    pairs = re.findall(r"^\s*require\s+(\S+)\s+(v\S+)", text, re.M)
    for block in re.findall(r"^\s*require\s*\((.*?)\)", text, re.M | re.S):
        pairs += re.findall(r"^\s*(\S+)\s+(v\S+)\s*$", block, re.M)
    return pairs

def escape(path):  # a module path as a proxy's URL has it: upper case as !lower
    return re.sub(r"[A-Z]", lambda m: "!" + m.group().lower(), path)

def zip_module(src, module, version, out):
    """The module zip of src: every regular file, less nested modules and vendor directories."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames[:] = sorted(d for d in dirnames if d != "vendor" and not d.startswith(".")
                                 and not os.path.exists(os.path.join(dirpath, d, "go.mod")))
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                info = zipfile.ZipInfo(f"{module}@{version}/{os.path.relpath(path, src)}", (1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                with open(path, "rb") as f:
                    z.writestr(info, f.read())

# Every module a go.mod reaches, from idemhttp's: the ones Debian has get their go.mod and a zip of their source under
# each version asked for; the others (a library's test dependencies; a directory of Debian's that declares another
# module path) a go.mod naming them, so the module graph is whole, and no zip: nothing here builds them.
queue, seen = requirements(open(start).read()), set()
while queue:
    module, version = queue.pop()
    if (module, version) in seen:
        continue
    seen.add((module, version))
    src = os.path.join(gocode, module)
    at = os.path.join(proxy, escape(module), "@v")
    os.makedirs(at, exist_ok=True)
    mod = f"module {module}\n"
    if os.path.isfile(os.path.join(src, "go.mod")):
        mod = open(os.path.join(src, "go.mod")).read()
    declared = re.search(r"^module\s+(\S+)", mod, re.M)
    if os.path.isdir(src) and declared and declared.group(1).strip('"') == module:
        zip_module(src, module, version, os.path.join(at, version + ".zip"))
        queue += requirements(mod)
    else:  # not in Debian, or Debian's directory holds another module (gopkg.in/yaml.v3 is go.yaml.in/yaml/v3)
        mod = f"module {module}\n"
    with open(os.path.join(at, version + ".mod"), "w") as f:
        f.write(mod)
    with open(os.path.join(at, version + ".info"), "w") as f:
        json.dump({"Version": version}, f)
    with open(os.path.join(at, "list"), "a") as f:
        f.write(version + "\n")
PY
  echo "$sources" >"$state/proxy.stamp"
fi

# idemhttp's artefact changed since the cache took it: the cache forgets idemhttp (read-only there: -modcacherw
# makes new entries writable, chmod the older ones).
if ! cmp -s "$pkg/dist/.stamp" "$state/dist.stamp"; then
  for stale in "$cache/$module@"* "$cache/cache/download/$module"; do
    [ -e "$stale" ] || continue
    chmod -R u+w "$stale" && rm -rf "$stale"
  done
  cp "$pkg/dist/.stamp" "$state/dist.stamp"
fi

for setting in "GOPROXY=file://$pkg/dist,file://$proxy" GOSUMDB=off GOTOOLCHAIN=local "GOFLAGS=-mod=mod -modcacherw" \
  "GOMODCACHE=$cache" "IDEMHTTP_VERSION=$version"; do
  printf 'export %q\n' "$setting"
done
