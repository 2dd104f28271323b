#!/usr/bin/env bash
# Moving between editions (tests/portable/run.sh): a data-only pg_dump of idem_keys and its token sequence from
# one edition restores into the other, extension -> portable (a team leaving its own servers for a managed
# service) and portable -> extension (the way back). Usage: move.sh WORK PORT PORTABLE_FILE
set -euo pipefail
cd "$(dirname "$0")/../.."
suite=portable
source tests/lib.sh
work=$1 port=$2 file=$3
bindir=$("$PG_CONFIG" --bindir)
as() { local role=$1 db=$2; shift 2; psql -X -q -At -v ON_ERROR_STOP=1 -h "$work/pg" -p "$port" -U "$role" -d "$db" "$@"; }
make_db() { # make_db NAME extension|portable
  as postgres postgres -c "CREATE DATABASE $1 OWNER app_owner"
  if [ "$2" = extension ]; then as postgres "$1" -c "CREATE EXTENSION idem_keys"; else as app_owner "$1" -f "$file" >/dev/null; fi
}
move() { # move FROM_KIND TO_KIND
  local from="move_from_$1" to="move_to_$2" old
  make_db "$from" "$1"
  make_db "$to" "$2"
  old=$(as postgres "$from" -f tests/portable/move_seed.sql | tail -1)
  sudo -u postgres "$bindir/pg_dump" -h "$work/pg" -p "$port" -d "$from" --data-only \
    -t idem_keys -t idem_keys_token_seq >"$work/move.sql"
  # The portable edition is restored by its owner (not a superuser), the extension by a superuser.
  local restorer=postgres; [ "$2" = portable ] && restorer=app_owner
  as "$restorer" "$to" -f "$work/move.sql" >/dev/null
  as postgres "$to" -c "SET move.old_token = $old" -f tests/portable/move_check.sql ||
    fail "a move from the $1 edition to the $2 edition lost something (above)"
  echo "$1 -> $2: $(as postgres "$to" -c "SELECT count(*) FROM idem_keys WHERE scope = 'moved'") keys; replays," \
       "the open claim recovered with a larger token than $old, the old token refused (55000)"
}
move extension portable
move portable extension
