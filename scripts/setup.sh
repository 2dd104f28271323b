#!/usr/bin/env bash
# Installs everything idem_keys needs for the PostgreSQL that PG_CONFIG names (default: Debian's 15), and
# nothing that is already there. Idempotent: every step checks first, so `make demo` and `make test` can
# call it on every run. Inside a major's root (scripts/pg_root.sh) it does the same for that major.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pg_major.sh

PGRX_VERSION=0.18.1
PG_MAJOR=$(pg_major)
need_pkgs=(zip libclang-dev clang build-essential pkg-config libssl-dev sudo)
if [[ " $WHEEL_MAJORS " == *" $PG_MAJOR "* ]]; then
  # Server, headers and pgxs come from the wheel's tree (scripts/pg16.sh), not from Debian.
  bash scripts/pg16.sh ensure
else
  # A fresh machine may not have read its package lists yet: read them before deciding a major is missing.
  # (The answers are read whole before grep: `grep -q` closing the pipe early fails it under pipefail.)
  has_candidate() { [[ $(apt-cache policy "postgresql-server-dev-$PG_MAJOR" 2>/dev/null) == *"Candidate: "[0-9]* ]]; }
  installed() { [[ $(dpkg-query -W -f='${Status}' "postgresql-server-dev-$PG_MAJOR" 2>/dev/null) == *"install ok installed"* ]]; }
  if ! installed && ! has_candidate; then apt-get update -qq; fi
  if ! installed && ! has_candidate; then
    echo "setup: PostgreSQL $PG_MAJOR is not in this machine's Debian suite." >&2
    echo "setup: \`PG_MAJORS=$PG_MAJOR make test\` runs it in a Debian root of its own (scripts/pg_root.sh)." >&2
    exit 1
  fi
  need_pkgs+=(postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR postgresql-$PG_MAJOR-cron)
fi

bash scripts/apt_install.sh setup "${need_pkgs[@]}"

# Debian's postgresql package creates a default cluster and may start it; we never use it, and its
# port 5432 would only confuse a newcomer's psql. Leave it alone if the user runs it on purpose.

export PATH="$HOME/.cargo/bin:$PATH"
if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "setup: installing cargo-pgrx $PGRX_VERSION (a few minutes, once per machine)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked --quiet
fi

# Writes ~/.pgrx/config.toml pointing at this major's pg_config; downloads nothing. `cargo pgrx init` rewrites
# the whole file, so the other majors already there (15 and 16 share the host) are passed again.
config=${PGRX_HOME:-$HOME/.pgrx}/config.toml
if ! grep -q "^pg$PG_MAJOR = \"$PG_CONFIG\"" "$config" 2>/dev/null; then
  majors=("--pg$PG_MAJOR" "$PG_CONFIG")
  while read -r other path; do
    if [ "$other" != "pg$PG_MAJOR" ] && [ -x "$path" ]; then majors+=("--$other" "$path"); fi
  done < <(sed -nE 's/^(pg[0-9]+) = "(.*)"$/\1 \2/p' "$config" 2>/dev/null)
  cargo pgrx init "${majors[@]}" >/dev/null
fi
