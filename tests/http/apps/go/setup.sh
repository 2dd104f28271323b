#!/usr/bin/env bash
# Builds the Go sample app into tests/http/apps/go/bin/$IDEM_STACK/app (packages/idemhttp/build_user.sh: in module
# mode against idemhttp's artefact, Go and pgx v5 from Debian). idemhttp needs pgx v5, which Debian ships in sid
# only: run it as go@sid (tests/http/setup.sh go@sid).
set -euo pipefail
cd "$(dirname "$0")"
bash ../../../../packages/idemhttp/build_user.sh "http go" . "$PWD/bin/${IDEM_STACK:-host}/app"
