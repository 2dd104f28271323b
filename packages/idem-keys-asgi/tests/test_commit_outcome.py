"""Which errors of a COMMIT prove that nothing was committed (503 commit-failed) and which leave the outcome unknown
(503 commit-unknown): the rule of docs/integrations.md, on errors built as psycopg builds them from the server's
ErrorResponse (its fields by code), so every row runs without making a server fail that way."""
import psycopg
import pytest
from psycopg.pq import DiagnosticField

from idem_keys_asgi.store import commit_outcome_unknown


def server_error(sqlstate, severity, localized=None):
    """The error psycopg raises for an ErrorResponse with this SQLSTATE and severity (`localized`: the severity
    as lc_messages translated it, when it differs)."""
    info = {DiagnosticField.SQLSTATE: sqlstate.encode(), DiagnosticField.SEVERITY: (localized or severity).encode(),
            DiagnosticField.SEVERITY_NONLOCALIZED: severity.encode(),
            DiagnosticField.MESSAGE_PRIMARY: b"the server's message"}
    return psycopg.errors.lookup(sqlstate)("the server's message", info=info)


def old_server_error(sqlstate, severity):
    """The same from a server before 9.6, which sends only the translated severity."""
    info = {DiagnosticField.SQLSTATE: sqlstate.encode(), DiagnosticField.SEVERITY: severity.encode()}
    return psycopg.errors.lookup(sqlstate)("the server's message", info=info)


ROLLED_BACK = {
    "serialization failure": server_error("40001", "ERROR"),
    "deferred unique check": server_error("23505", "ERROR"),
    "read-only standby": server_error("25006", "ERROR"),
    "aborted transaction": psycopg.errors.InFailedSqlTransaction("COMMIT would roll it back"),
    "an internal error, not a PANIC": server_error("XX000", "ERROR"),
    "FATAL outside class 08 and 57P0x": server_error("53300", "FATAL"),
}
UNKNOWN = {
    "connection lost (no SQLSTATE)": psycopg.OperationalError("consuming input failed: server closed the "
                                                              "connection unexpectedly"),
    "connection closed (no SQLSTATE)": psycopg.OperationalError("the connection is closed"),
    "connection failure (08006)": server_error("08006", "FATAL"),
    "admin shutdown (57P01)": server_error("57P01", "FATAL"),
    "crash shutdown (57P02)": server_error("57P02", "FATAL"),
    "cannot connect now (57P03)": server_error("57P03", "FATAL"),
    "PANIC, already committed (XX000)": server_error("XX000", "PANIC"),
    "PANIC, WAL flush failed (58030)": server_error("58030", "PANIC"),
    "PANIC, translated by lc_messages": server_error("XX000", "PANIC", localized="PANIK"),
    "PANIC from a server before 9.6": old_server_error("XX000", "PANIC"),
}


@pytest.mark.parametrize("error", list(ROLLED_BACK.values()), ids=list(ROLLED_BACK))
def test_an_error_answer_proves_a_rollback(error):
    assert not commit_outcome_unknown(error)


@pytest.mark.parametrize("error", list(UNKNOWN.values()), ids=list(UNKNOWN))
def test_a_lost_or_untrustworthy_answer_is_unknown(error):
    assert commit_outcome_unknown(error)
