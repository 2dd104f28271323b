#!/usr/bin/env bash
# The plain Rack sample app's dependencies: Ruby, Rack, pg, puma and connection_pool from Debian, and
# idem_keys-rack built from packages/ with `gem build` and installed into .gems here
# (packages/idem_keys-rack/install.sh: once per change of the package's files). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/apt_install.sh "http rack" ruby ruby-rack ruby-pg puma ruby-connection-pool
bash packages/idem_keys-rack/install.sh "$PWD/tests/http/apps/rack/.gems"
