#!/usr/bin/env bash
# serve.sh PORT: the Node sample app in the foreground on 127.0.0.1:PORT, on this stack's Node.js
# (packages/idem-keys-express/node.sh; setup.sh installs it). exec: the caller's pid is node's, and its command line
# names tests/http, which run.sh's clean-up looks for.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
port=${1:?usage: serve.sh PORT}
node_dir=$(bash "$here/../../../../packages/idem-keys-express/node.sh")
exec "$node_dir/node" "$here/server.js" "$port"
