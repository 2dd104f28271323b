#!/usr/bin/env bash
# serve.sh PORT: the Rails sample app in the foreground on 127.0.0.1:PORT, one puma process (exec: the caller's pid
# is puma's, and its process title names tests/http, which run.sh's clean-up looks for), on the stack it runs on
# ($IDEM_STACK, scripts/stacks.sh). DATABASE_URL, IDEM_LEASE, IDEM_WAIT, IDEM_OFF, IDEM_TX: config.ru. Install
# first: setup.sh.
set -euo pipefail
port=${1:?usage: serve.sh PORT}
here=$(cd "$(dirname "$0")" && pwd)
# The gem as installed by setup.sh for this stack; GEM_PATH unset keeps Debian's gems (Rails, Rack, pg, puma) on
# the path.
unset GEM_PATH
export GEM_HOME=$here/.gems-${IDEM_STACK:-host} RAILS_ENV=production RACK_ENV=production PORT=$port
exec puma --config "$here/puma.rb"
