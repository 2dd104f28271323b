"""The SQL calls, on the Django connection of the configured alias, bind parameters only (docs/integrations.md):
the same statements and fingerprint inputs as idem-keys-asgi. By default each runs as its own committed
statement (Django's autocommit): a claim must be visible to every duplicate before the view starts, and an answer
durable before the client sees it (two-step mode, docs/api.md). In transactional mode they run inside the
request's transaction.atomic block, which also holds the view's work."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from .conf import Interval

# Fields by name, never r.*: a newer idem_result may grow columns.
_CLAIM_JSON = """SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after
  FROM idem_claim(%s, %s, jsonb_build_object('method', %s::text, 'target', %s::text, 'body', %s::jsonb),
                  lease => %s::interval, wait => %s::interval) AS r"""
_CLAIM_BYTES = """SELECT r.outcome, r.token, r.status_code, r.response_bytes, r.headers, r.retry_after
  FROM idem_claim(%s, %s, %s::bytea, lease => %s::interval, wait => %s::interval) AS r"""
# The bytea overload: a replay repeats the body byte for byte, where jsonb would reorder and respace it.
_FINISH = "SELECT idem_finish(%s, %s, %s, %s, %s::bytea, headers => %s::jsonb, retention => %s::interval)"
_RELEASE = "SELECT idem_release(%s, %s, %s)"

# invalid_text_representation, untranslatable_character, character_not_in_repertoire: the body said JSON but
# jsonb cannot hold it; its bytes still fingerprint it.
_NOT_JSONB = frozenset({"22P02", "22P05", "22021"})
# object_not_in_prerequisite_state from idem_finish: another request took the key over (fencing token).
LEASE_LOST_SQLSTATE = "55000"


@dataclass(frozen=True)
class Claim:
    outcome: str  # claimed, recovered, replay, in_progress or mismatch
    token: int | None
    status_code: int | None
    response: bytes | None
    headers: Mapping[str, str] | None
    retry_after: int | None


@dataclass(frozen=True)
class Request:
    """What the fingerprint covers."""
    method: str
    target: str  # path and query as the client sent them, as latin-1 text (WSGI's and ASGI's)
    body: bytes
    is_json: bool

    def as_bytes(self) -> bytes:
        return self.method.encode("ascii") + b" " + self.target.encode("latin-1") + b"\n" + self.body


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error: Django wraps psycopg's, which is its __cause__."""
    for e in (error, error.__cause__):
        code = getattr(e, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def severity(error: BaseException) -> str | None:
    """The severity of a database error (ERROR, FATAL, PANIC) as the server wrote it, before translation
    (PostgreSQL 9.6 and later); the translated one only from an older server, where lc_messages may spell it
    otherwise. Django wraps psycopg's error, which is its __cause__."""
    for e in (error, error.__cause__):
        diag = getattr(e, "diag", None)
        if diag is not None:
            value = diag.severity_nonlocalized or diag.severity
            if isinstance(value, str):
                return value
    return None


def claim(connection: BaseDatabaseWrapper, scope: str, key: str, request: Request, lease: Interval | None,
          wait: Interval | None, restart: Callable[[], None] | None = None) -> Claim:
    """The JSON fingerprint first when the body says JSON, else (or when jsonb refuses it) the bytes one. In a
    transaction, `restart` begins it afresh after a refused JSON body, which aborted it."""
    if request.is_json:
        text = _as_text(request.body)  # None for an empty body too: no round trip that would only fail
        if text is not None:
            try:
                return _claim(connection, _CLAIM_JSON, (scope, key, request.method, request.target, text, lease,
                                                        wait))
            except Exception as e:
                if sqlstate(e) not in _NOT_JSONB:
                    raise
                if restart is not None:
                    # The failed cast aborted the transaction; it had written nothing yet, so start it afresh
                    # rather than pay a SAVEPOINT on every JSON claim.
                    restart()
    return _claim(connection, _CLAIM_BYTES, (scope, key, request.as_bytes(), lease, wait))


def _claim(connection: BaseDatabaseWrapper, sql: str, params: tuple[Any, ...]) -> Claim:
    with _cursor(connection) as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:  # a SELECT of one function call always returns one row
        raise RuntimeError("idem_claim returned no row")
    outcome, token, status_code, response, headers, retry_after = row
    if isinstance(headers, str):  # Django loads jsonb as text (its JSONField decodes it)
        headers = json.loads(headers)
    return Claim(outcome, token, status_code, None if response is None else bytes(response), headers, retry_after)


def _as_text(body: bytes) -> str | None:
    """The body as text for ::jsonb, or None when PostgreSQL could not take it as text at all (invalid UTF-8, or
    a NUL byte, which psycopg refuses before sending) or could only fail as JSON (an empty body): the bytes form
    fingerprints those. Every middleware applies the same test."""
    if not body or b"\x00" in body:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def finish(connection: BaseDatabaseWrapper, scope: str, key: str, token: int, status: int, body: bytes,
           headers: Mapping[str, str], retention: Interval | None) -> None:
    params: tuple[Any, ...] = (scope, key, token, status, body or None, json.dumps(headers), retention)
    with _cursor(connection) as cursor:
        cursor.execute(_FINISH, params)


def release(connection: BaseDatabaseWrapper, scope: str, key: str, token: int) -> bool:
    """False when the token no longer owns the key: another request took it over, nothing to give back."""
    with _cursor(connection) as cursor:
        cursor.execute(_RELEASE, (scope, key, token))
        row = cursor.fetchone()
    return bool(row and row[0])


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
