"""idem_keys_core's statements, run on the Django connection of the configured alias (docs/integrations.md). By
default each runs as its own committed statement (Django's autocommit): a claim must be visible to every duplicate
before the view starts, and an answer durable before the client sees it (two-step mode, docs/api.md). In
transactional mode they run inside the request's transaction.atomic block, which also holds the view's work."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from idem_keys_core import Claim, Request, Statement, statements
from idem_keys_core.errors import sqlstate_of


def claim(connection: BaseDatabaseWrapper, scope: str, key: str, request: Request, lease: float | None,
          wait: float | None, restart: Callable[[], None] | None = None) -> Claim:
    """Each claim in turn until one is not refused as JSON (the last, the bytes form, always answers). In a
    transaction, `restart` begins it afresh after a refused JSON body, which aborted it."""
    *json_first, by_bytes = statements.claim_statements(scope, key, request, lease, wait)
    for statement in json_first:
        try:
            return _claim(connection, statement)
        except Exception as e:
            if not statements.refused_as_json(sqlstate_of(e)):
                raise
            if restart is not None:
                # The failed cast aborted the transaction; it had written nothing yet, so start it afresh rather
                # than pay a SAVEPOINT on every JSON claim.
                restart()
    return _claim(connection, by_bytes)


def _claim(connection: BaseDatabaseWrapper, statement: Statement) -> Claim:
    with _cursor(connection) as cursor:
        cursor.execute(statement.sql, statement.params)
        row = cursor.fetchone()
    return statements.claim_from_row(row)


def finish(connection: BaseDatabaseWrapper, scope: str, key: str, token: int, status: int, body: bytes,
           headers: Mapping[str, str], retention: float | None) -> None:
    statement = statements.finish_statement(scope, key, token, status, body, headers, retention)
    with _cursor(connection) as cursor:
        cursor.execute(statement.sql, statement.params)


def release(connection: BaseDatabaseWrapper, scope: str, key: str, token: int) -> bool:
    """False when the token no longer owns the key: another request took it over, nothing to give back."""
    statement = statements.release_statement(scope, key, token)
    with _cursor(connection) as cursor:
        cursor.execute(statement.sql, statement.params)
        return statements.released_from_row(cursor.fetchone())


@contextmanager
def _cursor(connection: BaseDatabaseWrapper) -> Iterator[CursorWrapper]:
    """A cursor of the connection. A statement that failed because the connection is gone (the server restarted,
    or ended the session) closes it at once, outside an atomic block (inside one, leaving the block does): Django
    would only at the end of the request (close_if_unusable_or_obsolete, on the request_finished signal), and
    not at all where nothing sends that signal, handing the dead connection to every later statement."""
    try:
        with connection.cursor() as cursor:
            yield cursor
    except DatabaseError:
        raw = connection.connection
        if raw is not None and raw.closed and not connection.in_atomic_block:
            connection.close()
        raise
