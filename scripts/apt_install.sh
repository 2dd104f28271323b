#!/usr/bin/env bash
# apt_install.sh WHO PACKAGE...: installs the Debian packages that are missing, and nothing else.
set -euo pipefail
who=$1; shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "$who: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Another install running at the same time (a stage in the background, a root being built) holds dpkg's lock:
  # wait for it rather than fail.
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
