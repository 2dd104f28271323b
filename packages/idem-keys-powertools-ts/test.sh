#!/usr/bin/env bash
# idem-keys-powertools' own tests, once per release of @aws-lambda-powertools/idempotency that the peer range admits
# (test/powertools-versions.txt): the layer under Powertools' own makeIdempotent, idempotent decorator and Middy
# middleware, then the types. The two ends of the range run every test on a database with the idem_keys extension
# AND on one with the portable edition (two databases the caller makes); the releases between them run every test
# on the extension only, since what differs between releases is Powertools, not the edition.
# The tests run on the package as npm installs it: its `npm pack` tarball, unpacked under .powertools/<version>/
# (gitignored) beside that release of Powertools, installed there once (the lockfile's release comes from
# node_modules, the dev dependencies installed once per change of the lockfile). A skipped or todo test fails. The
# releases run side by side (POWERTOOLS_JOBS, below).
#   test.sh                        every release of the range
#   POWERTOOLS_RELEASES=ends       the oldest and the newest only
#   test.sh 2.26.0                 one release (both editions)
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL_EXTENSION:?DATABASE_URL_EXTENSION must name a database with CREATE EXTENSION idem_keys done}"
: "${DATABASE_URL_PORTABLE:?DATABASE_URL_PORTABLE must name a database with the portable edition installed (docs/portable.md)}"
bash ../../scripts/npm_ci.sh "idem-keys-powertools" . # Debian's Node.js if there is none, then the lockfile
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
  || { echo "idem-keys-powertools: node 18 or later is needed, not $(node --version)" >&2; exit 1; }

package=@aws-lambda-powertools/idempotency
versions_file=test/powertools-versions.txt
mapfile -t lines < <(grep -v '^#' "$versions_file" | grep -v '^[[:space:]]*$')
((${#lines[@]} >= 2)) || { echo "idem-keys-powertools: $versions_file lists fewer than two releases" >&2; exit 1; }
oldest=${lines[0]%% *} newest=${lines[-1]%% *}

# The file must agree with package.json: its first release is the peer range's floor, its last the lockfile's.
floor=$(node -p "require('./package.json').peerDependencies['$package'].replace(/^\\^/, '')")
locked=$(node -p "require('./package-lock.json').packages['node_modules/$package'].version")
[ "$oldest" = "$floor" ] || { echo "idem-keys-powertools: $versions_file starts at $oldest, the peer range at ^$floor" >&2; exit 1; }
[ "$newest" = "$locked" ] || { echo "idem-keys-powertools: $versions_file ends at $newest, the lockfile has $locked" >&2; exit 1; }

# Prints the directory to run release $1 in (pins after it: name@version), made once per release: the package as
# npm installs it (its `npm pack` tarball, unpacked), its tests beside it, and a node_modules with that release of
# Powertools (and what it brought) and everything else from the lockfile's node_modules.
release_dir() {
  local version=$1; shift
  local root=$PWD/.powertools/$version spec="$package@$version $*"
  if [ "$version" != "$locked" ] && [ "$(cat "$root/.installed" 2>/dev/null)" != "$spec" ]; then
    rm -rf "$root"
    mkdir -p "$root/deps"
    echo '{"private": true}' > "$root/deps/package.json"
    # --legacy-peer-deps: a release's own peers (Middy, the AWS SDK) are not needed, and the pins replace what
    # its caret ranges would pick today.
    # shellcheck disable=SC2086
    (cd "$root/deps" && npm install --no-audit --no-fund --loglevel=error --legacy-peer-deps --no-save \
      "$package@$version" $* >&2)
    echo "$spec" > "$root/.installed"
  fi
  local pkg=$root/pkg
  rm -rf "$pkg"; mkdir -p "$pkg/node_modules/@aws-lambda-powertools"
  tar -xzf "$tarball" --strip-components=1 -C "$pkg"
  cp -r test "$pkg/"
  local entry name
  if [ "$version" != "$locked" ]; then
    for entry in "$root"/deps/node_modules/* "$root"/deps/node_modules/@aws-lambda-powertools/*; do
      name=${entry#"$root"/deps/node_modules/}
      [ "$name" = @aws-lambda-powertools ] || ln -s "$entry" "$pkg/node_modules/$name"
    done
  fi
  for entry in node_modules/* node_modules/@aws-lambda-powertools/*; do
    name=${entry#node_modules/}
    [ "$name" = @aws-lambda-powertools ] || [ -e "$pkg/node_modules/$name" ] || ln -s "$PWD/$entry" "$pkg/node_modules/$name"
  done
  echo "$pkg"
}

# $1 release, $2 the editions to run, $3 its directory (release_dir), rest: pins.
run_release() {
  local version=$1 editions=$2 dir=$3; shift 3
  local started=$SECONDS tap installed
  installed=$(node -p "JSON.parse(require('fs').readFileSync('$dir/node_modules/$package/package.json')).version")
  [ "$installed" = "$version" ] || { echo "idem-keys-powertools: $dir loads $package $installed, not $version" >&2; exit 1; }
  echo "idem-keys-powertools: Powertools $version${*:+ (with $*)}"
  tap=$(mktemp)
  for edition in $editions; do
    if [ "$edition" = extension ]; then url=$DATABASE_URL_EXTENSION; else url=$DATABASE_URL_PORTABLE; fi
    echo "idem-keys-powertools: every test on the $edition, Powertools $version"
    (cd "$dir" && DATABASE_URL=$url IDEM_EDITION=$edition node --test \
      --test-reporter=spec --test-reporter-destination=stdout \
      --test-reporter=tap --test-reporter-destination="$tap" test/*.test.js)
    if ! grep -q '^# skipped 0$' "$tap" || ! grep -q '^# todo 0$' "$tap" || ! grep -q '^# fail 0$' "$tap"; then
      echo "idem-keys-powertools: a test failed, was skipped or left todo on the $edition, Powertools $version" >&2
      rm -f "$tap"; exit 1
    fi
  done
  rm -f "$tap"
  echo "idem-keys-powertools: types, Powertools $version"
  (cd "$dir" && node node_modules/typescript/bin/tsc -p test/types)
  echo "idem-keys-powertools: Powertools $version: ok in $((SECONDS - started)) s"
}

tarball=$(bash ../../scripts/install_npm_pack.sh . | tail -1) # the package as the registry would serve it
# The releases picked, each made ready one after another (npm installs share a cache), then run side by side,
# POWERTOOLS_JOBS at a time (default 4): every test has a scope of its own (test/helpers.js), so runs on one
# database never see each other's keys, and most of a run is waiting on leases and gates, not on a core. Not all
# eight at once: the fencing tests give a claim 300 ms past its lease, which eight runs on two cores could eat.
# Each release's output is shown whole, in order, once all are done.
picked=() logs=() pids=()
work=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
for line in "${lines[@]}"; do
  read -r -a fields <<< "$line"
  version=${fields[0]}
  if [ -n "${1:-}" ]; then
    [ "$version" = "$1" ] || continue
    editions="extension portable"
  elif [ "$version" = "$oldest" ] || [ "$version" = "$newest" ]; then
    editions="extension portable"
  else
    [ "${POWERTOOLS_RELEASES:-all}" = ends ] && continue
    editions=extension
  fi
  dir=$(release_dir "$version" "${fields[@]:1}")
  picked+=("$version|$editions|$dir|${fields[*]:1}")
done
((${#picked[@]} > 0)) || { echo "idem-keys-powertools: no release $1 in $versions_file" >&2; exit 1; }
jobs_max=${POWERTOOLS_JOBS:-4}
for i in "${!picked[@]}"; do
  IFS='|' read -r version editions dir pins <<< "${picked[$i]}"
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n || true; done
  logs[i]=$work/$i.log
  # shellcheck disable=SC2086
  (run_release "$version" "$editions" "$dir" $pins >"${logs[i]}" 2>&1; echo $? >"${logs[i]}.status") &
  pids[i]=$!
done
wait
failed=0
for i in "${!picked[@]}"; do
  cat "${logs[i]}"
  [ "$(cat "${logs[i]}.status" 2>/dev/null)" = 0 ] || { echo "idem-keys-powertools: release ${picked[$i]%%|*} FAILED" >&2; failed=1; }
done
((failed == 0)) || exit 1
echo "idem-keys-powertools: ${#picked[@]} releases of $package ok"
