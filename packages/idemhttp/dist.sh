#!/usr/bin/env bash
# dist.sh [VERSION]: builds idemhttp as a module proxy serves it, and prints its version. The artefact is
# dist/<module>/@v/VERSION.zip, .mod and .info, and the list: the layout GOPROXY=file://<this directory>/dist reads
# (modenv.sh puts it in front of Debian's Go sources). The zip holds the files git would commit from this directory
# (tracked, or new and not ignored), as they are in the working tree.
#
# VERSION is vX.Y.Z (a canonical semantic version, major 0 or 1: the module path has no /vN). Without it, the
# checkout's: the tag packages/idemhttp/vX.Y.Z on HEAD (Go's tag for a module in that subdirectory); else Go's
# pseudo-version for HEAD, vX.Y.(Z+1)-0.TIME-COMMIT after the nearest such tag, v0.0.0-TIME-COMMIT when there is
# none (TIME: HEAD's commit time, UTC; COMMIT: its first 12 hex digits), as `go get` names an untagged commit. Outside
# a git checkout the version must be given. Rebuilt once per change of the version or of the files; quiet.
set -euo pipefail
pkg=$(cd "$(dirname "$0")" && pwd)
module=$(sed -n 's/^module //p' "$pkg/go.mod")
fail() { echo "idemhttp dist.sh: $*" >&2; exit 1; }

# checkout_version prints the version of HEAD, from the tags of this directory.
checkout_version() {
  git -C "$pkg" rev-parse --git-dir >/dev/null 2>&1 || fail "not in a git checkout: give the version (dist.sh vX.Y.Z)"
  local prefix tag base time commit
  prefix=$(git -C "$pkg" rev-parse --show-prefix)v # packages/idemhttp/v
  time=$(TZ=UTC git -C "$pkg" log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)
  commit=$(git -C "$pkg" rev-parse HEAD | cut -c1-12)
  if tag=$(git -C "$pkg" describe --tags --exact-match --match "$prefix*" HEAD 2>/dev/null); then
    echo "v${tag#"$prefix"}"
  elif tag=$(git -C "$pkg" describe --tags --abbrev=0 --match "$prefix*" HEAD 2>/dev/null); then
    base=v${tag#"$prefix"}
    if [[ $base == *-* ]]; then # after a pre-release: vX.Y.Z-pre.0.TIME-COMMIT
      echo "$base.0.$time-$commit"
    else # after a release: the next patch's pre-release, vX.Y.(Z+1)-0.TIME-COMMIT
      local patch=${base##*.}
      echo "${base%.*}.$((patch + 1))-0.$time-$commit"
    fi
  else
    echo "v0.0.0-$time-$commit"
  fi
}

version=${1:-$(checkout_version)}
[[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  fail "version '$version' is not vMAJOR.MINOR.PATCH[-PRERELEASE]"
[[ $version == v0.* || $version == v1.* ]] ||
  fail "version $version: a major version of 2 or more needs the module path to end in /v${version%%.*}"

# The files, NUL-separated, relative to this directory.
if git -C "$pkg" rev-parse --git-dir >/dev/null 2>&1; then
  list_files() { git -C "$pkg" ls-files -z --cached --others --exclude-standard .; }
else
  list_files() { (cd "$pkg" && find . -path ./dist -prune -o -path './.go-*' -prune -o -type f -printf '%P\0'); }
fi
time=$(TZ=UTC git -C "$pkg" log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD 2>/dev/null ||
  date -u +%Y-%m-%dT%H:%M:%SZ)
list_files | python3 -c '
import hashlib, json, os, sys, zipfile
pkg, module, version, time = sys.argv[1:]
files = sorted(f for f in sys.stdin.read().split("\0") if f and os.path.isfile(os.path.join(pkg, f)))
digest = hashlib.sha256(version.encode())
for name in files:
    digest.update(name.encode() + b"\0" + open(os.path.join(pkg, name), "rb").read() + b"\0")
stamp, proxy = os.path.join(pkg, "dist", ".stamp"), os.path.join(pkg, "dist", module, "@v")
if os.path.exists(stamp) and open(stamp).read() == digest.hexdigest() and os.path.exists(f"{proxy}/{version}.zip"):
    sys.exit(0)
# Written beside, then moved in: a reader of the old artefact never sees half of the new one.
new = proxy + ".new"
os.makedirs(new, exist_ok=True)
for old in os.listdir(new):
    os.remove(os.path.join(new, old))
with zipfile.ZipFile(f"{new}/{version}.zip", "w", zipfile.ZIP_DEFLATED) as z:
    for name in files:  # every file under module@version/, with a fixed time: the same files give the same zip
        info = zipfile.ZipInfo(f"{module}@{version}/{name}", (1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        z.writestr(info, open(os.path.join(pkg, name), "rb").read(), zipfile.ZIP_DEFLATED)
with open(os.path.join(pkg, "go.mod"), "rb") as src, open(f"{new}/{version}.mod", "wb") as dst:
    dst.write(src.read())
with open(f"{new}/{version}.info", "w") as info:
    json.dump({"Version": version, "Time": time}, info)
with open(f"{new}/list", "w") as versions:
    versions.write(version + "\n")
if os.path.exists(proxy):
    for old in os.listdir(proxy):
        os.remove(os.path.join(proxy, old))
    os.rmdir(proxy)
os.rename(new, proxy)
with open(stamp, "w") as f:
    f.write(digest.hexdigest())
' "$pkg" "$module" "$version" "$time"
echo "$version"
