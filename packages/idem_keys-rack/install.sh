#!/usr/bin/env bash
# install.sh GEM_HOME: builds the gem from this directory (gem build) and installs that artefact into GEM_HOME
# (gem install --local), as a user installs a downloaded gem; once per change of the package's files, whose hash
# is kept in GEM_HOME. No network: GEM_PATH is left unset, so RubyGems' default path (Debian's gems: rack, pg)
# stays beside GEM_HOME, and --local resolves the dependencies there. GEM_HOME is this gem's alone: it is
# emptied before each install.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
home=${1:?usage: install.sh GEM_HOME}
files=(idem_keys-rack.gemspec README.md CHANGELOG.md install.sh)
hash=$(cd "$here" && { find lib -type f; printf '%s\n' "${files[@]}"; } | LC_ALL=C sort | xargs sha256sum \
  | sha256sum | cut -d' ' -f1)
[ "$(cat "$home/.installed-sha256" 2>/dev/null)" != "$hash" ] || exit 0
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
# Quiet unless it fails: it warns that the gemspec has no homepage yet (see the gemspec).
if ! out=$(cd "$here" && gem build idem_keys-rack.gemspec --output "$build/idem_keys-rack.gem" 2>&1); then
  echo "$out" >&2
  exit 1
fi
rm -rf "$home"
mkdir -p "$home"
env -u GEM_PATH GEM_HOME="$home" gem install --local --no-document --quiet "$build/idem_keys-rack.gem" >/dev/null
echo "$hash" >"$home/.installed-sha256"
echo "idem_keys-rack: built and installed $(cd "$home/gems" && echo idem_keys-rack-*) into $home"
