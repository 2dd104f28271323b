#!/usr/bin/env bash
# install_npm_pack.sh PACKAGE_DIR [PROJECT_DIR]: packs the npm package in PACKAGE_DIR as the registry would serve it
# (`npm pack`: only the files its package.json names, into PACKAGE_DIR/dist) and installs that tarball into the npm
# project PROJECT_DIR (its node_modules already made from its lockfile), as a user's `npm install` would, without
# touching PROJECT_DIR's package.json or lockfile. Packs once per change of the package's files (their hash is kept
# in dist/), installs once per new tarball (its hash is kept in PROJECT_DIR/node_modules, which `npm ci` clears).
# Without PROJECT_DIR, only packs. Prints the tarball's path on the last line. One run per PACKAGE_DIR at a time,
# and one per PROJECT_DIR (locks on them): the host and a Debian root may set up the same directories at once.
set -euo pipefail
scripts=$(cd "$(dirname "$0")" && pwd)
dir=$(cd "${1:?usage: install_npm_pack.sh PACKAGE_DIR PROJECT_DIR}" && pwd)
project=${2:+$(cd "$2" && pwd)}
exec {package_lock}<"$dir"
flock "$package_lock"
if [ -n "$project" ]; then exec {project_lock}<"$project"; flock "$project_lock"; fi
cd "$dir"
name=$(node -p "require('./package.json').name")
hash=$(bash "$scripts/tree_hash.sh" . './dist/*' './node_modules/*' './.powertools/*')
if [ "$(cat dist/.source-sha256 2>/dev/null)" != "$hash" ] || ! compgen -G "dist/*.tgz" >/dev/null; then
  rm -rf dist; mkdir dist
  npm pack --silent --pack-destination dist >/dev/null
  echo "$hash" >dist/.source-sha256
  echo "$name: packed $(cd dist && echo *.tgz)" >&2
fi
tarball=$(compgen -G "$dir/dist/*.tgz")
if [ -z "$project" ]; then echo "$tarball"; exit 0; fi
tarball_hash=$(sha256sum "$tarball" | cut -d' ' -f1)
marker="$project/node_modules/.$name-tarball"
if [ "$(cat "$marker" 2>/dev/null)" != "$tarball_hash" ]; then
  # --no-save: the project's package.json and lockfile stay as they are (npm ci keeps working from them).
  (cd "$project" && npm install --no-save --no-audit --no-fund --loglevel=error "$tarball" >&2)
  installed=$(node -p "JSON.parse(require('fs').readFileSync('$project/node_modules/$name/package.json')).version")
  [ "$installed" = "$(node -p "require('$dir/package.json').version")" ] \
    || { echo "install_npm_pack.sh: $project loads $name $installed" >&2; exit 1; }
  [ ! -L "$project/node_modules/$name" ] || { echo "install_npm_pack.sh: $name is a link, not the tarball" >&2; exit 1; }
  echo "$tarball_hash" >"$marker"
  echo "$name: installed $(basename "$tarball") into $project" >&2
fi
echo "$tarball"
