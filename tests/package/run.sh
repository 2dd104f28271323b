#!/usr/bin/env bash
# make package's artefacts for PG_CONFIG's major install into a clean PostgreSQL of that major and work: the .deb with dpkg, the tarball by its
# INSTALL.md; META.json carries Cargo.toml's version. Removes the development install first and puts it
# back (cargo pgrx install) at the end, so the tests after this one run on the usual build.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/pg_major.sh
export PATH="$HOME/.cargo/bin:$PATH"
version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)
major=$(pg_major) dev_config=$PG_CONFIG
libdir=$("$PG_CONFIG" --pkglibdir) extdir=$("$PG_CONFIG" --sharedir)/extension
dir=$(mktemp -d /tmp/idem-pkg.XXXXXX) port=25359; chown postgres: "$dir"
fail() { echo "package: FAILED: $*" >&2; exit 1; }
restore() {
  bash scripts/cluster.sh stop "$dir/pg"; rm -rf "$dir"
  dpkg -s "postgresql-$major-idem-keys" >/dev/null 2>&1 && dpkg -r "postgresql-$major-idem-keys" >/dev/null
  cargo pgrx install --release --pg-config "$dev_config" >/dev/null
}
trap restore EXIT
clean() { rm -f "$libdir/idem_keys.so" "$extdir"/idem_keys.control "$extdir"/idem_keys--*.sql; }
works() { # a throwaway cluster: CREATE EXTENSION, claim, finish, replay
  bash scripts/cluster.sh stop "$dir/pg"; rm -rf "$dir/pg"
  bash scripts/cluster.sh start "$dir/pg" "$port"
  local got
  got=$("$("$PG_CONFIG" --bindir)/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$dir/pg" -p "$port" -U postgres \
          -c 'CREATE EXTENSION idem_keys' \
          -c "SELECT idem_finish('p', 'k', (idem_claim('p', 'k', '{}'::jsonb)).token, 201, '{\"ok\": true}'::jsonb)" \
          -c "SELECT extversion FROM pg_extension WHERE extname = 'idem_keys'" \
          -c "SELECT (r).outcome || ' ' || (r).response::text FROM (SELECT idem_claim('p', 'k', '{}'::jsonb) r) s")
  [ "$got" = "$(printf '\n%s\nreplay {"ok": true}' "$version")" ] || fail "$1: got '$got'"
}

IDEM_ONE_MAJOR=1 bash scripts/package.sh >/dev/null 2>&1 || fail "make package failed for PostgreSQL $major"
deb=dist/postgresql-$major-idem-keys_${version}-1_$(dpkg --print-architecture).deb
tarball=$(ls dist/idem_keys-"$version"-pg"$major"-linux-*.tar.gz)
[ -f "$deb" ] && [ -f "$tarball" ] && [ -f "dist/idem_keys-$version.zip" ] || fail "an artefact is missing"
[ "$(unzip -p "dist/idem_keys-$version.zip" "idem_keys-$version/META.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["version"])')" = "$version" ] \
  || fail "META.json does not carry version $version"

if [[ " $WHEEL_MAJORS " == *" $major "* ]]; then
  # No postgresql-$major Debian package is reachable here, so neither dpkg -i nor the Debian paths can be
  # tried: the .deb's files and the tarball's second form of INSTALL.md go into a clean copy of the tree.
  PG_CONFIG=$(bash scripts/pg16.sh copy "$dir/tree") libdir=$("$PG_CONFIG" --pkglibdir) extdir=$("$PG_CONFIG" --sharedir)/extension
  [ ! -e "$libdir/idem_keys.so" ] || fail "the copy of the tree still has the development install"
  dpkg-deb -f "$deb" Depends | grep -q "postgresql-$major" || fail "the .deb does not depend on postgresql-$major"
  dpkg-deb -x "$deb" "$dir/deb"
  cp "$dir/deb/usr/lib/postgresql/$major/lib/"* "$libdir/" && cp "$dir/deb/usr/share/postgresql/$major/extension/"* "$extdir/" \
    || fail "the .deb lacks the Debian layout of PostgreSQL $major"
  works deb
  clean
  echo "package: $(basename "$deb") has PGDG's layout; its files, in a clean PostgreSQL $major tree, work (dpkg -i not tried: no postgresql-$major package here)"
  mkdir -p "$dir/t" && tar -xzf "$tarball" -C "$dir/t"
  grep -q 'pg_config --pkglibdir' "$dir"/t/*/INSTALL.md || fail "INSTALL.md lacks the pg_config form"
  (cd "$dir"/t/*/ && export PATH="$("$PG_CONFIG" --bindir):$PATH" && # the steps INSTALL.md gives
   cp usr/lib/postgresql/$major/lib/* "$(pg_config --pkglibdir)/" &&
   cp usr/share/postgresql/$major/extension/* "$(pg_config --sharedir)/extension/")
  works tarball
  echo "package: $(basename "$tarball") installs into a clean PostgreSQL $major tree by its INSTALL.md, CREATE EXTENSION works; META.json version $version"
  exit 0
fi

clean
[ ! -e "$libdir/idem_keys.so" ] || fail "could not remove the development install"
dpkg -i "$deb" >/dev/null
dpkg -L "postgresql-$major-idem-keys" | grep -q "$libdir/idem_keys.so" || fail "the .deb does not install the library"
works deb
dpkg -r "postgresql-$major-idem-keys" >/dev/null
[ ! -e "$libdir/idem_keys.so" ] && [ ! -e "$extdir/idem_keys.control" ] || fail "dpkg -r left files behind"
echo "package: $(basename "$deb") installs with dpkg, CREATE EXTENSION works, dpkg -r removes it"

mkdir -p "$dir/t" && tar -xzf "$tarball" -C "$dir/t"
grep -q 'cp -r' "$dir"/t/*/INSTALL.md || fail "INSTALL.md lacks the install step"
cp -r "$dir"/t/*/usr/. /usr/          # the step INSTALL.md gives
works tarball
clean
echo "package: $(basename "$tarball") installs by its INSTALL.md, CREATE EXTENSION works; META.json version $version"
