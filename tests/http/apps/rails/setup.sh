#!/usr/bin/env bash
# The Rails sample app's dependencies: Ruby, Rails 6.1, Rack, pg and puma from Debian, and idem_keys-rack built
# from packages/ with `gem build` and installed into .gems here (packages/idem_keys-rack/install.sh: once per
# change of the package's files). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
bash scripts/apt_install.sh "http rails" ruby ruby-rack ruby-pg puma ruby-rails ruby-bootsnap
bash packages/idem_keys-rack/install.sh "$PWD/tests/http/apps/rails/.gems"
