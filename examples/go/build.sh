#!/usr/bin/env bash
# Builds the Go example into examples/go/bin/payments (packages/idemhttp/build_user.sh: in module mode against
# idemhttp's artefact, Go and pgx v5 from Debian). idemhttp needs pgx v5, which Debian ships in sid only, so from the
# repository root:
#   bash scripts/stacks.sh run sid bash examples/go/build.sh
# The binary is static (no cgo), so it runs on the host, beside `make demo`'s server or under the e2e suite.
set -euo pipefail
cd "$(dirname "$0")"
CGO_ENABLED=0 bash ../../packages/idemhttp/build_user.sh "go example" . "$PWD/bin/payments"
