#!/usr/bin/env bash
# The portable edition (dist/idem_keys_portable.sql, `make portable`) against a real server of this major:
#   install   by the database's owner, who is not a superuser; again (same version: a no-op that keeps keys)
#   contract  the extension's own golden files (claim, finish, checkpoint, errors, lookup_sweep, sweep_paced,
#             bulk_claims, claim_body)
#             give the extension's expected output, unchanged; the isolation specs likewise, but write_once
#             (the extension's write-once claim; PL/pgSQL has no commit hook to write a deferred claim at)
#   own       tests/portable/sql: security, settings, tenant binding
#   surface   every function, type, table column and index the extension has, with the same signature
#   fingerprints  both editions on generated values, byte for byte
#   moves     a data-only dump of the table and its sequence, extension -> portable and back
#   upgrade   over a hand-made older shape (0.1.0's table and functions), and over the last release's file
#             (tests/portable/released): keys, tokens, grants and settings kept, the catalog equal to a fresh
#             install
#   pg_cron   a schedule of CALL idem_sweep_paced(), where this major has pg_cron
#   uninstall one statement
# Needs the extension built and installed for this PG_CONFIG (stage_suite does it).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/pg_major.sh
suite=portable
source tests/lib.sh
major=$(pg_major)
bindir=$("$PG_CONFIG" --bindir)
port=${PORTABLE_PORT:-25371}
work=$(mktemp -d /tmp/idem-portable.XXXXXX)
chmod 755 "$work"
trap 'bash scripts/cluster.sh stop "$work/pg"; rm -rf "$work"' EXIT
file=$work/idem_keys_portable.sql
python3 scripts/portable.py "$file" >/dev/null
chmod 644 "$file"
version=$(sed -nE 's/^version = "(.*)"/\1/p' Cargo.toml | head -1)

with_cron=yes
[[ " $NO_PG_CRON_MAJORS " == *" $major "* ]] && with_cron=
bash scripts/cluster.sh start "$work/pg" "$port" \
  ${with_cron:+"shared_preload_libraries = 'pg_cron'" "cron.database_name = 'app'" "cron.host = '$work/pg'"}
as() { local role=$1 db=$2; shift 2; psql -X -q -At -v ON_ERROR_STOP=1 -h "$work/pg" -p "$port" -U "$role" -d "$db" "$@"; }
install_into() { as "$1" "$2" -f "$file" 2>&1 | { grep -v '^$' || true; }; }

echo "--- install: by the database's owner, who is not a superuser (what a managed service gives its admin)"
as postgres postgres -c "CREATE ROLE app_owner LOGIN CREATEROLE CREATEDB" -c "CREATE DATABASE app OWNER app_owner"
install_into app_owner app
[ "$(as app_owner app -c 'SELECT idem_keys_portable_version()')" = "$version" ] || fail "the installed version is not $version"
as app_owner app -c "SELECT (idem_claim('install', 'k', '{}'::jsonb)).token" >"$work/token"
# The owner's binding and cap, which the verbs read from function bodies (portable/settings.sql), outlive a
# second run of the file, and a new session obeys them.
as app_owner app -c "SELECT idem_keys_configure('idem_keys.tenant_binding', 'role')" \
  -c "SELECT idem_keys_configure('idem_keys.max_response_bytes', '100')" >/dev/null
install_into app_owner app
as app_owner app -c "CREATE ROLE install_caller LOGIN"
sqlstate() { as install_caller app -v VERBOSITY=sqlstate -c "$1" 2>&1 | sed -n 's/^ERROR: *//p'; }
[ "$(sqlstate "SELECT idem_claim('someone_else', 'k', '{}'::jsonb)")" = 42501 ] ||
  fail "tenant binding was lost by running the file again"
token=$(as install_caller app -c "SELECT (idem_claim('install_caller', 'k', '{}'::jsonb)).token")
[ "$(sqlstate "SELECT idem_finish('install_caller', 'k', $token, 200, jsonb_build_object('pad', repeat('x', 200)))")" = 54000 ] ||
  fail "the size cap was lost by running the file again"
as app_owner app -c "SELECT idem_keys_configure('idem_keys.tenant_binding', NULL)" \
  -c "SELECT idem_keys_configure('idem_keys.max_response_bytes', NULL)" \
  -c "DELETE FROM idem_keys WHERE scope = 'install_caller'" >/dev/null
[ "$(as app_owner app -c "SELECT idem_keys_binding() || ' ' || idem_keys_max_response_bytes()")" = "off 1048576" ] ||
  fail "the defaults did not come back"
# However the owner writes the table (here without idem_keys_configure, as a data-only restore does), the
# verbs obey it; a binding no release knows is refused (22023); TRUNCATE brings the defaults back.
as app_owner app -c "INSERT INTO idem_keys_settings VALUES ('idem_keys.tenant_binding', 'role')" >/dev/null
[ "$(sqlstate "SELECT idem_claim('someone_else', 'k', '{}'::jsonb)")" = 42501 ] ||
  fail "a binding written into idem_keys_settings directly is not in force"
[ "$(as app_owner app -v VERBOSITY=sqlstate -c "UPDATE idem_keys_settings SET value = 'everyone'" 2>&1 | sed -n 's/^ERROR: *//p')" = 22023 ] ||
  fail "an unknown binding written into idem_keys_settings was not refused"
as app_owner app -c "TRUNCATE idem_keys_settings" >/dev/null
[ -z "$(sqlstate "SELECT idem_claim('someone_else', 'k', '{}'::jsonb)")" ] || fail "TRUNCATE did not turn the binding off"
as app_owner app -c "DELETE FROM idem_keys WHERE scope = 'someone_else'" -c "DROP ROLE install_caller" >/dev/null
[ "$(as app_owner app -c "SELECT token FROM idem_keys WHERE scope = 'install'")" = "$(cat "$work/token")" ] ||
  fail "running the file again lost a key"
[ "$(as app_owner app -c "SELECT (idem_claim('install', 'k', '{}'::jsonb)).outcome")" = in_progress ] ||
  fail "the key claimed before the second run is not in progress after it"
as app_owner app -c "DELETE FROM idem_keys WHERE scope = 'install'"
echo "installed $version as app_owner (superuser: $(as postgres app -c "SELECT rolsuper FROM pg_roles WHERE rolname = 'app_owner'")), twice, keys and the owner's settings kept"
# Refused (42501), with nothing made, where every role may create objects in the schema.
as postgres postgres -c "CREATE DATABASE open_schema OWNER app_owner"
as postgres open_schema -c "GRANT CREATE ON SCHEMA public TO PUBLIC"
if as app_owner open_schema -f "$file" >"$work/open.out" 2>&1; then fail "installed into a schema every role may create in"; fi
grep -q 'every role may create objects in schema public' "$work/open.out" || { cat "$work/open.out"; fail "no clear refusal"; }
[ "$(as app_owner open_schema -c "SELECT count(*) FROM pg_class WHERE relname LIKE 'idem%'")" = 0 ] ||
  fail "the refused install left objects behind"
echo "refused, with nothing made, where every role may create objects in the schema"

# The golden files run against the existing database (tests/lib.sh).
GOLDENS_HOST=$work/pg GOLDENS_PORT=$port GOLDENS_DB=app GOLDENS_SCRATCH=$work GOLDENS_BLESSABLE=tests/portable

echo "--- contract: the extension's golden files, unchanged, against the portable edition"
run_goldens regress tests/pg_regress claim finish checkpoint errors lookup_sweep sweep_paced bulk_claims claim_body
run_goldens isolation tests/isolation $(ls tests/isolation/specs | sed 's/\.spec$//' | grep -vx write_once | sort)

echo "--- the portable edition's own: security, settings, tenant binding"
run_goldens regress tests/portable $(ls tests/portable/sql | sed 's/\.sql$//' | sort)

echo "--- surface: the extension's API, signature for signature"
as postgres postgres -c "CREATE DATABASE ext"
as postgres ext -c "CREATE EXTENSION idem_keys"
as postgres ext -f tests/portable/surface.sql >"$work/ext.surface"
as postgres app -f tests/portable/surface.sql >"$work/portable.surface"
diff -u "$work/ext.surface" "$work/portable.surface" || fail "the portable edition's API differs from the extension's (above)"
echo "same API: $(wc -l <"$work/ext.surface") properties of functions, types, columns and indexes compared"

echo "--- fingerprints: both editions on generated values"
as postgres ext -c "CREATE SCHEMA portable AUTHORIZATION app_owner"
as app_owner ext -c "SET search_path = portable" -f "$file" >/dev/null
python3 tests/portable/values.py >"$work/values.tsv"
as postgres ext -c "CREATE TABLE fingerprint_values (n serial, value jsonb, raw bytea)" \
  -c "\\copy fingerprint_values (value, raw) FROM '$work/values.tsv'"
read -r compared differ < <(as postgres ext -F ' ' -c "
  SELECT count(*), count(*) FILTER (WHERE public.idem_fingerprint(value) IS DISTINCT FROM portable.idem_fingerprint(value)
                                      OR public.idem_fingerprint(raw) IS DISTINCT FROM portable.idem_fingerprint(raw))
    FROM fingerprint_values")
if [ "$differ" != 0 ]; then
  as postgres ext -c "SELECT value FROM fingerprint_values
                       WHERE public.idem_fingerprint(value) <> portable.idem_fingerprint(value) LIMIT 5"
  fail "$differ of $compared values have another fingerprint in the portable edition"
fi
[ "$compared" -ge 20000 ] || fail "only $compared values were generated"
echo "$compared generated values (and their bytes): the same fingerprints in both editions"
# And what must stay apart stays apart in both.
disagreements=$(as postgres ext -f tests/portable/fingerprint_pairs.sql)
[ -z "$disagreements" ] || fail "fingerprint pairs: $disagreements"

echo "--- moves: a data-only dump of the table and its token sequence, each way"
bash tests/portable/move.sh "$work" "$port" "$file"

echo "--- upgrade: over a hand-made older shape"
as postgres postgres -c "CREATE DATABASE old OWNER app_owner" -c "CREATE DATABASE fresh OWNER app_owner" \
  -c "CREATE ROLE janitor"
# 0.1.0's table, sequence, indexes and type, from the released install script, as plain SQL.
python3 - >"$work/older_0.1.0.sql" <<'PY'
import re
text = open("sql/idem_keys--0.1.0.sql").read()
text = text[text.index("CREATE SEQUENCE"):]
text = text[:text.index(");", text.index("CREATE TYPE")) + 2]
print(re.sub(r"^SELECT pg_catalog\.pg_extension_config_dump.*\n", "", text, flags=re.M).replace("@extschema@.", ""))
PY
as app_owner old -f "$work/older_0.1.0.sql" -f tests/portable/older_shape.sql >/dev/null
before=$(as app_owner old -c "SELECT count(*), max(token), (SELECT last_value FROM idem_keys_token_seq) FROM idem_keys")
install_into app_owner old
after=$(as app_owner old -c "SELECT count(*), max(token), (SELECT last_value FROM idem_keys_token_seq) FROM idem_keys")
[ "$before" = "$after" ] || fail "the upgrade changed the keys or the sequence: $before -> $after"
[ "$(as app_owner old -c "SELECT (idem_claim('old', 'finished', '{\"amount\": 1.50}'::jsonb)).outcome")" = replay ] ||
  fail "a key finished before the upgrade does not replay"
[ "$(as app_owner old -c "SELECT has_function_privilege('janitor', 'idem_stats()', 'EXECUTE')")" = t ] ||
  fail "the upgrade lost the grant of idem_stats to janitor"
install_into app_owner fresh
as app_owner fresh -c "GRANT EXECUTE ON FUNCTION idem_stats() TO janitor"
for db in old fresh; do
  sudo -u postgres "$bindir/pg_dump" -h "$work/pg" -p "$port" -s -d "$db" | grep -Ev '^(--|$|\\(un)?restrict )' >"$work/$db.schema"
done
diff -u "$work/fresh.schema" "$work/old.schema" || fail "the upgraded schema differs from a fresh install (above)"
echo "upgraded $before (keys, largest token, sequence) kept, janitor's grant kept, schema equal to a fresh install"

echo "--- upgrade: over the last release's file (tests/portable/released)"
released=$(ls tests/portable/released/idem_keys_portable-*.sql | sort -V | tail -1)
as postgres postgres -c "CREATE DATABASE prev OWNER app_owner"
as app_owner prev -f "$released" >/dev/null 2>&1
as app_owner prev -c "SELECT idem_finish('app_owner:prev', 'k', (idem_claim('app_owner:prev', 'k', '{\"amount\": 1.50}'::jsonb)).token, 201, '{\"id\": 1}'::jsonb)" \
  -c "SELECT idem_keys_configure('idem_keys.tenant_binding', 'role')" -c "GRANT EXECUTE ON FUNCTION idem_stats() TO janitor" >/dev/null
install_into app_owner prev
[ "$(as app_owner prev -c "SELECT (idem_claim('app_owner:prev', 'k', '{\"amount\": 1.5}'::jsonb)).response")" = '{"id": 1}' ] ||
  fail "a key finished under $(basename "$released") does not replay after the upgrade"
as app_owner prev -c "CREATE ROLE prev_caller LOGIN" >/dev/null
[ "$(as prev_caller prev -v VERBOSITY=sqlstate -c "SELECT idem_claim('someone_else', 'k', '{}'::jsonb)" 2>&1 | sed -n 's/^ERROR: *//p')" = 42501 ] ||
  fail "the tenant binding configured under $(basename "$released") was lost by the upgrade"
as app_owner prev -c "DROP ROLE prev_caller" -c "SELECT idem_keys_configure('idem_keys.tenant_binding', NULL)" >/dev/null
sudo -u postgres "$bindir/pg_dump" -h "$work/pg" -p "$port" -s -d prev | grep -Ev '^(--|$|\\(un)?restrict )' >"$work/prev.schema"
diff -u "$work/fresh.schema" "$work/prev.schema" || fail "the schema upgraded from $(basename "$released") differs from a fresh install (above)"
echo "$(basename "$released") -> $version: a finished key replays, the owner's tenant binding kept, janitor's grant kept," \
     "schema equal to a fresh install"

echo "--- upgrade: from this version to a next one, as every later release will"
sed "s/'$version'/'$version.1'/g" "$file" >"$work/next.sql"
as app_owner fresh -c "REVOKE EXECUTE ON FUNCTION idem_lookup(text, text) FROM PUBLIC" \
  -c "SELECT (idem_claim('next', 'k', '{}'::jsonb)).token" >"$work/next.token"
# A view of the application on one of the functions: the upgrade stops (2BP01) and changes nothing.
as app_owner fresh -c "CREATE VIEW app_fingerprint AS SELECT idem_fingerprint('{}'::jsonb) AS empty_request"
if as app_owner fresh -f "$work/next.sql" >"$work/next.out" 2>&1; then fail "upgraded past a view that uses idem_fingerprint"; fi
grep -q 'cannot upgrade: other objects depend on its functions' "$work/next.out" || { cat "$work/next.out"; fail "no clear refusal"; }
[ "$(as app_owner fresh -c 'SELECT idem_keys_portable_version()')" = "$version" ] || fail "the refused upgrade changed the version"
as app_owner fresh -c "DROP VIEW app_fingerprint"
as app_owner fresh -f "$work/next.sql" >/dev/null
[ "$(as app_owner fresh -c 'SELECT idem_keys_portable_version()')" = "$version.1" ] || fail "the next version is not installed"
[ "$(as app_owner fresh -c "SELECT token FROM idem_keys WHERE scope = 'next'")" = "$(cat "$work/next.token")" ] ||
  fail "the upgrade to the next version lost a key"
[ "$(as app_owner fresh -c "SELECT has_function_privilege('janitor', 'idem_stats()', 'EXECUTE'),
                                  has_function_privilege('public', 'idem_lookup(text, text)', 'EXECUTE'),
                                  has_function_privilege('public', 'idem_claim(text, text, jsonb, interval, interval)', 'EXECUTE')")" = "t|f|t" ] ||
  fail "the upgrade to the next version did not keep the grants and revokes an administrator made"
echo "$version -> $version.1: refused (2BP01, nothing changed) while a view used idem_fingerprint; then the key and its" \
     "token kept, janitor's grant and the revoke of idem_lookup from PUBLIC kept"

if [ -n "$with_cron" ]; then
  echo "--- pg_cron: the database's owner schedules the paced sweep"
  bash tests/portable/cron.sh "$work" "$port"
else
  echo "--- pg_cron: not available for PostgreSQL $major here (its build has none); tested on the other majors"
fi

echo "--- uninstall: one statement"
as app_owner fresh -c "SELECT idem_keys_portable_uninstall()" >/dev/null
left=$(as app_owner fresh -c "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relname LIKE 'idem%'")
left=$((left + $(as app_owner fresh -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proname LIKE 'idem%'")))
left=$((left + $(as app_owner fresh -c "SELECT count(*) FROM pg_type WHERE typnamespace = 'public'::regnamespace AND typname LIKE 'idem%'")))
[ "$left" = 0 ] || fail "$left objects left after idem_keys_portable_uninstall()"
echo "SELECT idem_keys_portable_uninstall() left nothing behind"
