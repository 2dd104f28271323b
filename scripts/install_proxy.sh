#!/usr/bin/env bash
# Installs idem_keys_proxy (proxy/: SQL only; it calls idem_keys' library, which make install puts beside it) into the extension directory of the PostgreSQL that
# PG_CONFIG names. PL/Proxy itself comes from Debian (postgresql-NN-plproxy).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$("${PG_CONFIG:-/usr/bin/pg_config}" --sharedir)/extension
install -m 644 proxy/idem_keys_proxy.control proxy/idem_keys_proxy--*.sql "$dir/"
