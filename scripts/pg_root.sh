#!/usr/bin/env bash
# One Debian root filesystem per PostgreSQL major that bookworm does not ship (17 from trixie, 18 from sid).
# Installing trixie or sid packages into the bookworm host would replace libc and 90+ packages, so each major
# gets its own root, built once with debootstrap and reused after. The host's Rust toolchain, cargo-pgrx and
# the checkout (and ../shared beside it, where vendored sources such as Citus live) are bind-mounted into it, so
# nothing is downloaded twice and a build there sees the same tree.
#   pg_root.sh ensure MAJOR           build the root (if missing) and install what is missing in it
#   pg_root.sh run MAJOR CMD [ARG...] run CMD inside the root, in the checkout, with PG_CONFIG set to that major
#   pg_root.sh path MAJOR             print where the root lives
# Roots live in $IDEM_ROOTS (default /var/cache/idem_keys/roots), outside the checkout, so a fresh clone and
# `git clean` keep them. Mounts are made in a private mount namespace (unshare), so they go away with CMD.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
roots=${IDEM_ROOTS:-/var/cache/idem_keys/roots}

suite_of() {
  case $1 in
    17) echo trixie ;;
    18) echo sid ;;
    *) echo "pg_root: no root is needed or known for PostgreSQL $1 (15 runs on the host)" >&2; exit 2 ;;
  esac
}

# The mirror apt already uses on this machine (debian.sources or sources.list), not a hard-coded one.
mirror() {
  local m
  m=$(grep -hoE '^URIs:\s*\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  [ -n "$m" ] || m=$(grep -hoE '^deb\s+\S+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -1 || true)
  echo "${m:-http://deb.debian.org/debian}"
}

# What the test stages need inside the root: the server and its headers, pg_cron, a C toolchain and libclang
# for pgrx's bindgen, sudo for running servers as postgres, python3 for the suites' small helpers.
packages() {
  echo "postgresql-$1 postgresql-server-dev-$1 postgresql-$1-cron clang libclang-dev build-essential pkg-config"
  echo "libssl-dev sudo python3 procps zip unzip git ca-certificates dpkg-dev"
}

ensure() {
  local major=$1 suite dir
  suite=$(suite_of "$major") dir="$roots/pg$major"
  bash "$here/scripts/apt_install.sh" pg_root debootstrap
  # One ensure per root at a time: the background set-up and a host stage that needs a newer stack (the HTTP
  # suite) may both ask for it; the second waits, then finds it built.
  mkdir -p "$roots"
  exec {lock}>"$roots/pg$major.lock"
  flock "$lock"
  if [ ! -f "$dir/.debootstrap-done" ]; then
    echo "pg_root: building a $suite root for PostgreSQL $major in $dir (about a minute, once per machine)"
    rm -rf "$dir"; mkdir -p "$dir"
    debootstrap --variant=minbase "$suite" "$dir" "$(mirror)" >"$roots/pg$major-debootstrap.log" 2>&1 \
      || { tail -n 20 "$roots/pg$major-debootstrap.log" >&2; exit 1; }
    # sid's Release file is often past its Valid-Until; apt inside the root (here and in setup.sh) must
    # still take it.
    [ "$suite" = sid ] && echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/99idem-keys"
    touch "$dir/.debootstrap-done"
  fi
  local missing
  # shellcheck disable=SC2046
  missing=$(in_root "$major" bash -c 'for p in "$@"; do dpkg-query -W -f="\${Status}" "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"; done' _ $(packages "$major"))
  if [ -n "$missing" ]; then
    echo "pg_root: installing in the PostgreSQL $major root: $(echo $missing)"
    in_root "$major" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
    # shellcheck disable=SC2086
    in_root "$major" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
      --no-install-recommends $missing >/dev/null
  fi
  # Debian's postgresql package creates and starts a default cluster; in a root nobody wants it.
  in_root "$major" bash -c 'ls /etc/postgresql 2>/dev/null | grep -q . && pg_dropcluster --stop '"$major"' main 2>/dev/null; true'
  flock --unlock "$lock"
}

# in_root MAJOR CMD...: CMD in the root with /proc, /sys, /dev, the toolchain and the checkout mounted, all in a
# private mount namespace. The host's resolver config goes in so apt can reach the registry.
in_root() {
  local major=$1; shift
  local dir="$roots/pg$major"
  cp /etc/resolv.conf /etc/hosts "$dir/etc/" 2>/dev/null || true # apt's registry; sudo's own host name
  # `run` execs this (and the namespace's shell execs chroot, which execs CMD): CMD keeps the caller's pid, so a
  # test that signals the pid it started signals CMD itself.
  ${IN_ROOT_EXEC:-} unshare --mount --propagation private -- bash -c '
    set -e
    dir=$1 here=$2; shift 2
    mount -t proc proc "$dir/proc"
    mount -t sysfs sysfs "$dir/sys"
    mount --rbind /dev "$dir/dev"
    mount -t tmpfs tmpfs "$dir/dev/shm"
    for d in "$HOME/.cargo" "$HOME/.rustup" "$here" "$(dirname "$here")/shared"; do
      [ -d "$d" ] || continue
      mkdir -p "$dir$d"; mount --bind "$d" "$dir$d"
    done
    # The host'"'"'s trust store: pip, npm and git in the root trust what the host trusts (a machine behind a
    # TLS-inspecting proxy adds its CA there).
    bundle=/etc/ssl/certs/ca-certificates.crt
    if [ -f "$bundle" ] && [ -d "$dir/etc/ssl/certs" ]; then
      touch "$dir$bundle"; mount --bind -o ro "$bundle" "$dir$bundle"
    fi
    exec chroot "$dir" "$@"
  ' _ "$dir" "$here" "$@"
}

case "${1:-}" in
  ensure) ensure "$2" ;;
  path) suite_of "$2" >/dev/null; echo "$roots/pg$2" ;;
  run)
    major=$2; shift 2
    [ -f "$roots/pg$major/.debootstrap-done" ] || ensure "$major"
    # The knobs of the benchmark and test scripts and the apps' and packages' settings (IDEM_*, POWERTOOLS_*,
    # DATABASE_URL*, REDIS_URL) cross into the root; nothing else of the host's environment.
    mapfile -t knobs < <(env | grep -E '^((BENCH_|AB_|IDEM_|POWERTOOLS_)[A-Z0-9_]*|DATABASE_URL[A-Z_]*|REDIS_URL)=' || true)
    # And what points tools at the trust store and the proxy, as on the host (the bundle is mounted: in_root).
    mapfile -t -O "${#knobs[@]}" knobs < <(env | grep -E '^(SSL_CERT_FILE|SSL_CERT_DIR|PIP_CERT|REQUESTS_CA_BUNDLE|NODE_EXTRA_CA_CERTS|CURL_CA_BUNDLE|GIT_SSL_CAINFO|PIP_INDEX_URL|PIP_DEFAULT_TIMEOUT|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)=' || true)
    IN_ROOT_EXEC=exec in_root "$major" env -i "${knobs[@]}" HOME="$HOME" PATH="$HOME/.cargo/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
      TERM="${TERM:-dumb}" CI="${CI:-}" BLESS="${BLESS:-}" LANG=C.UTF-8 \
      PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" CARGO_TARGET_DIR="$here/target/pg$major" \
      bash -c 'cd "$1" && shift && exec "$@"' _ "$here" "$@"
    ;;
  *) echo "usage: $0 ensure MAJOR | run MAJOR CMD... | path MAJOR" >&2; exit 2 ;;
esac
