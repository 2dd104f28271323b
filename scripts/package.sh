#!/usr/bin/env bash
# `make package`: installable artefacts that need no Rust on the target, all versioned from Cargo.toml.
#   dist/postgresql-<major>-idem-keys_<version>-1_<arch>.deb    Debian package (dpkg -i)
#   dist/idem_keys-<version>-pg<major>-linux-<arch>.tar.gz      the same files under usr/, plus INSTALL.md
#   dist/idem_keys-<version>.zip                               PGXN source distribution, with META.json
#   dist/idem_keys_portable.sql                                the portable edition (make portable)
# One .deb and tarball per major in PG_MAJORS (default: every supported one): 15 is built here, 17 and 18
# in their Debian roots (scripts/pg_root.sh), so each links against the libc its Debian release ships. 16 is
# built here against the 16.2 headers of PyPI's pgserver wheel (scripts/pg16.sh), for bookworm's libc and the
# layout of PGDG's postgresql-16 package.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh
export PATH="$HOME/.cargo/bin:$PATH"
major=$(pg_major)
if [ -z "${IDEM_ONE_MAJOR:-}" ]; then
  for other in ${PG_MAJORS:-$SUPPORTED_MAJORS}; do
    [ "$other" = "$major" ] && continue
    [ "$(where_major "$other")" = root ] && bash scripts/pg_root.sh ensure "$other"
    in_major "$other" bash scripts/setup.sh
    in_major "$other" env IDEM_ONE_MAJOR=1 bash scripts/package.sh
  done
  [[ " ${PG_MAJORS:-$SUPPORTED_MAJORS} " == *" $major "* ]] || exit 0
fi
field() { sed -nE "s/^$1 = \"(.*)\"/\1/p" Cargo.toml | head -1; }
version=$(field version) description=$(field description) license=$(field license)
arch=$(dpkg --print-architecture)
stage=target/package-stage-pg$major out=dist
rm -rf "$stage" && mkdir -p "$stage" "$out"

# The built extension, laid out as it installs (usr/lib/postgresql/N/lib, usr/share/postgresql/N/extension).
# cargo pgrx lays it out where PG_CONFIG's server keeps its files: for Debian's servers that is this layout
# already; a server installed elsewhere (16's wheel tree) has its files moved into it.
cargo pgrx package --pg-config "$PG_CONFIG" --out-dir "$stage/root" >/dev/null
root="$stage/root"
debian_layout() { # $1 the server's directory, $2 the Debian one
  [ "$1" = "$2" ] && return
  mkdir -p "$root$2" && mv "$root$1"/* "$root$2/"
  find "$root" -depth -type d -empty -delete
}
debian_layout "$("$PG_CONFIG" --pkglibdir)" "/usr/lib/postgresql/$major/lib"
debian_layout "$("$PG_CONFIG" --sharedir)/extension" "/usr/share/postgresql/$major/extension"
# idem_keys_proxy (SQL over this library, docs/scale-out.md) ships in the same package: a PL/Proxy router installs it.
install -m 644 proxy/idem_keys_proxy.control proxy/idem_keys_proxy--*.sql "$root/usr/share/postgresql/$major/extension/"
find "$root" -type f | sed "s|^$root/||" | sort > "$stage/files"

# META.json for PGXN, from the same fields.
cat > "$stage/META.json" <<JSON
{
  "name": "idem_keys",
  "abstract": "$description",
  "version": "$version",
  "maintainer": ["idem_keys developers"],
  "license": "postgresql",
  "provides": {
    "idem_keys": {"file": "sql/bootstrap.sql", "version": "$version", "abstract": "$description"}
  },
  "prereqs": {"runtime": {"requires": {"PostgreSQL": "15.0.0"}}},
  "resources": {"bugtracker": {"web": "https://github.com/idem-keys/idem_keys/issues"}},
  "generated_by": "scripts/package.sh",
  "meta-spec": {"version": "1.0.0", "url": "https://pgxn.org/meta/spec.txt"},
  "tags": ["idempotency", "payments", "retries", "pgrx"]
}
JSON
python3 -m json.tool "$stage/META.json" >/dev/null

# Debian package.
deb="$stage/deb"
mkdir -p "$deb/DEBIAN"
cp -a "$root/." "$deb/"
cat > "$deb/DEBIAN/control" <<CONTROL
Package: postgresql-$major-idem-keys
Version: $version-1
Architecture: $arch
Maintainer: idem_keys developers <idem-keys@example.org>
Depends: postgresql-$major, libc6 (>= $(ldd --version | sed -nE '1s/.* ([0-9]+\.[0-9]+)$/\1/p')), libgcc-s1
Section: database
Priority: optional
Description: $description
 idem_keys gives any application stack idempotency keys from SQL: idem_claim, idem_finish,
 idem_lookup, idem_sweep. License: $license. Built with pgrx for PostgreSQL $major.
CONTROL
debfile="$out/postgresql-$major-idem-keys_${version}-1_${arch}.deb"
dpkg-deb --root-owner-group --build "$deb" "$debfile" >/dev/null

# Tarball of the same files, with install instructions.
tarroot="$stage/idem_keys-$version-pg$major-linux-$arch"
mkdir -p "$tarroot"
cp -a "$root/usr" "$tarroot/"
cp "$stage/META.json" "$tarroot/"
cat > "$tarroot/INSTALL.md" <<TXT
# idem_keys $version for PostgreSQL $major ($arch)

Built for Debian's PostgreSQL $major packages (pg_config --pkglibdir = /usr/lib/postgresql/$major/lib).
No Rust toolchain is needed. As root:

    tar -xzf idem_keys-$version-pg$major-linux-$arch.tar.gz
    cp -r idem_keys-$version-pg$major-linux-$arch/usr/. /usr/

A PostgreSQL $major installed elsewhere (built from source, or unpacked from an archive) takes the same
files where its own pg_config says:

    cd idem_keys-$version-pg$major-linux-$arch
    cp usr/lib/postgresql/$major/lib/* "\$(pg_config --pkglibdir)/"
    cp usr/share/postgresql/$major/extension/* "\$(pg_config --sharedir)/extension/"

Then, in each database: CREATE EXTENSION idem_keys; (after an upgrade: ALTER EXTENSION idem_keys UPDATE;).
For the background sweeper add shared_preload_libraries = 'idem_keys' and restart PostgreSQL.
Files: $(tr '\n' ' ' < "$stage/files")
TXT
tar -C "$stage" -czf "$out/$(basename "$tarroot").tar.gz" "$(basename "$tarroot")"

# PGXN source distribution: the committed tree plus META.json.
git archive --format=zip --prefix="idem_keys-$version/" -o "$out/idem_keys-$version.zip" HEAD
(cd "$stage" && mkdir -p "idem_keys-$version" && cp META.json "idem_keys-$version/" && zip -q "../../$out/idem_keys-$version.zip" "idem_keys-$version/META.json")

# The portable edition (docs/portable.md): one SQL file for every major, for servers without the extension.
python3 scripts/portable.py "$out/idem_keys_portable.sql" >/dev/null

echo "package: idem_keys $version for PostgreSQL $major ($arch)"
ls -l "$out" | sed 1d
