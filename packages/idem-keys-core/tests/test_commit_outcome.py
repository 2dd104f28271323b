"""Which errors of a COMMIT prove that nothing was committed (503 commit-failed) and which leave the outcome unknown
(503 commit-unknown): the rule of docs/integrations.md, on errors built as psycopg builds them from the server's
ErrorResponse (its fields by code), so every row runs without making a server fail that way; and the same errors
wrapped as Django wraps them (psycopg's as the __cause__)."""
import psycopg
import pytest
from psycopg.pq import DiagnosticField

from idem_keys_core.errors import commit_outcome_unknown, lease_lost, severity_of, sqlstate_of


def server_error(sqlstate, severity, localized=None, nonlocalized=True):
    """psycopg's error for an ErrorResponse with this SQLSTATE and severity (`localized`: the severity as
    lc_messages translated it; `nonlocalized` False: a server before 9.6, which sends only that one)."""
    info = {DiagnosticField.SQLSTATE: sqlstate.encode(), DiagnosticField.SEVERITY: (localized or severity).encode(),
            DiagnosticField.MESSAGE_PRIMARY: b"the server's message"}
    if nonlocalized:
        info[DiagnosticField.SEVERITY_NONLOCALIZED] = severity.encode()
    return psycopg.errors.lookup(sqlstate)("the server's message", info=info)


class Wrapped(Exception):
    """A driver error as Django raises it: its own class, `from` psycopg's."""


def wrapped(error):
    outer = Wrapped(*error.args)
    outer.__cause__ = error
    return outer


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
    "PANIC from a server before 9.6": server_error("XX000", "PANIC", nonlocalized=False),
}


@pytest.mark.parametrize("wrap", [lambda e: e, wrapped], ids=["psycopg", "wrapped"])
@pytest.mark.parametrize("error", list(ROLLED_BACK.values()), ids=list(ROLLED_BACK))
def test_an_error_answer_proves_a_rollback(error, wrap):
    assert not commit_outcome_unknown(wrap(error))


@pytest.mark.parametrize("wrap", [lambda e: e, wrapped], ids=["psycopg", "wrapped"])
@pytest.mark.parametrize("error", list(UNKNOWN.values()), ids=list(UNKNOWN))
def test_a_lost_or_untrustworthy_answer_is_unknown(error, wrap):
    assert commit_outcome_unknown(wrap(error))


def test_reading_an_error():
    error = server_error("55000", "ERROR")
    assert sqlstate_of(error) == sqlstate_of(wrapped(error)) == "55000"
    assert severity_of(wrapped(server_error("XX000", "PANIC", localized="PANIK"))) == "PANIC"
    assert lease_lost(wrapped(error)) and not lease_lost(server_error("54000", "ERROR"))
    assert sqlstate_of(RuntimeError("not a database error")) is None
