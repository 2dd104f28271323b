#!/usr/bin/env bash
# The Rails sample app's dependencies on the stack it runs on ($IDEM_STACK, scripts/stacks.sh): Ruby, Rails, Rack,
# pg and puma from Debian (host, bookworm: Rails 6.1 on Rack 2.2, puma 5.6, the oldest end of idem_keys-rack's
# range; trixie: Rails 7.2 on Rack 3.1, puma 6.6, the newest), and idem_keys-rack built from packages/ with
# `gem build` and installed into .gems-$IDEM_STACK here (packages/idem_keys-rack/install.sh: once per change of the
# package's files). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
stack=${IDEM_STACK:-host}
case $stack in
  host | trixie) packages=(ruby ruby-rack ruby-pg puma ruby-rails ruby-bootsnap) ;;
  *) echo "http rails: no Rails app on stack '$stack' (host or trixie)" >&2; exit 2 ;;
esac
bash scripts/apt_install.sh "http rails" "${packages[@]}"
bash packages/idem_keys-rack/install.sh "$PWD/tests/http/apps/rails/.gems-$stack"
