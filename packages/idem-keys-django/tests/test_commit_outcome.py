"""A COMMIT's error as Django raises it (its own class, psycopg's error from the server's ErrorResponse as its
__cause__) is read through to psycopg's: the classification itself (commit-failed or commit-unknown, case by
case) is idem_keys_core's, tested there on psycopg's errors."""
import psycopg
import pytest
from django.db import utils
from psycopg.pq import DiagnosticField

from idem_keys_core.errors import commit_outcome_unknown

class _Connection:
    """What Django's DatabaseErrorWrapper reads of a connection: the driver's module, for its error classes."""
    Database = psycopg
    errors_occurred = False


def as_django_raises(error):
    """A psycopg error through Django's own DatabaseErrorWrapper: Django's class, `from` psycopg's."""
    try:
        with utils.DatabaseErrorWrapper(_Connection()):
            raise error
    except utils.Error as wrapped:
        assert wrapped.__cause__ is error
        return wrapped
    raise AssertionError("not raised")


def server_error(sqlstate, severity):
    info = {DiagnosticField.SQLSTATE: sqlstate.encode(), DiagnosticField.SEVERITY: severity.encode(),
            DiagnosticField.SEVERITY_NONLOCALIZED: severity.encode()}
    return psycopg.errors.lookup(sqlstate)("the server's message", info=info)


@pytest.mark.parametrize(("error", "unknown"), [
    (server_error("23505", "ERROR"), False),  # a deferred unique check: rolled back
    (server_error("40001", "ERROR"), False),  # a serialization failure
    (psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"), True),
    (server_error("57P01", "FATAL"), True),  # the server shut the session down
    (server_error("XX000", "PANIC"), True),
], ids=["deferred unique check", "serialization failure", "connection lost", "admin shutdown", "PANIC"])
def test_djangos_error_is_read_through(error, unknown):
    assert commit_outcome_unknown(as_django_raises(error)) is unknown
