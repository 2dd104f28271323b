#!/usr/bin/env bash
# Installs everything idem_keys needs on a fresh Debian 12 machine, and nothing that is already there.
# Idempotent: every step checks first, so `make demo` and `make test` can call it on every run.
set -euo pipefail

PGRX_VERSION=0.18.1
PG_MAJOR=15
need_pkgs=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-$PG_MAJOR-cron zip
           libclang-dev clang build-essential pkg-config libssl-dev sudo)

bash "$(dirname "$0")/apt_install.sh" setup "${need_pkgs[@]}"

# Debian's postgresql package creates a default cluster and may start it; we never use it, and its
# port 5432 would only confuse a newcomer's psql. Leave it alone if the user runs it on purpose.

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION (a few minutes, once per machine)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

# Writes ~/.pgrx/config.toml pointing at Debian's pg_config; downloads nothing.
if ! grep -q "pg$PG_MAJOR" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
  cargo pgrx init --pg$PG_MAJOR /usr/bin/pg_config >/dev/null
fi
