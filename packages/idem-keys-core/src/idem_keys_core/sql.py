"""The four statements every middleware sends (contract/sql.json), in psycopg's placeholders, and the SQLSTATEs the
packages act on. Bind parameters only; durations are seconds (a float8, or NULL for the server's setting) that
make_interval turns into an interval."""
from __future__ import annotations

# Fields by name, never r.*: a newer idem_result may grow columns.
_RESULT = "SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after"
_LEASE_AND_WAIT = "lease => make_interval(secs => %s::float8), wait => make_interval(secs => %s::float8)"

CLAIM_JSON = (f"{_RESULT} FROM idem_claim(%s, %s, jsonb_build_object('method', %s::text, 'target', %s::text, "
              f"'body', %s::jsonb), {_LEASE_AND_WAIT}) AS r")
CLAIM_BYTES = f"{_RESULT} FROM idem_claim(%s, %s, %s::bytea, {_LEASE_AND_WAIT}) AS r"
# The bytea overload: a replay repeats the body byte for byte, where jsonb would reorder and respace it.
FINISH = ("SELECT idem_finish(%s, %s, %s::bigint, %s::integer, %s::bytea, headers => %s::jsonb, "
          "retention => make_interval(secs => %s::float8))")
RELEASE = "SELECT idem_release(%s, %s, %s::bigint) AS released"

# invalid_text_representation, untranslatable_character, character_not_in_repertoire: the body said JSON but
# jsonb cannot hold it; its bytes still fingerprint it.
NOT_JSONB = frozenset({"22P02", "22P05", "22021"})
# object_not_in_prerequisite_state from idem_finish: another request took the key over (fencing token).
LEASE_LOST = "55000"
# admin_shutdown, crash_shutdown, cannot_connect_now: the server shut the session down, so its answer to a COMMIT
# is not the COMMIT's outcome.
SESSION_SHUT_DOWN = frozenset({"57P01", "57P02", "57P03"})
