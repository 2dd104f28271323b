"""The three SQL calls the middleware makes, bind parameters only (docs/integrations.md). By default each runs as
its own committed statement: a claim must be visible to every duplicate before the handler starts, and an answer
durable before the client sees it (two-step mode, docs/api.md). In transactional mode the claim and the finish run
on the request's own connection, inside the transaction that also holds the handler's work (`Transaction`)."""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from psycopg.pq import TransactionStatus

from . import checkout

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

# A duration as psycopg sends it (timedelta) or as PostgreSQL reads it ("30s", "5 minutes").
Interval: TypeAlias = timedelta | str

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
    target: bytes  # path and query as the client sent them
    body: bytes
    is_json: bool

    def as_bytes(self) -> bytes:
        return self.method.encode("ascii") + b" " + self.target + b"\n" + self.body


async def claim(pool: AsyncConnectionPool[Any], scope: str, key: str, request: Request,
                lease: Interval | None, wait: Interval | None) -> Claim:
    async def run(sql: str, params: tuple[Any, ...]) -> Claim:
        async with checkout.statement(pool) as conn:
            return await _claim(conn, sql, params)

    return await _claim_either(run, None, scope, key, request, lease, wait)


async def claim_in(tx: Transaction, scope: str, key: str, request: Request, lease: Interval | None,
                   wait: Interval | None) -> Claim:
    """The claim inside the request's transaction: it commits with the handler's work, or not at all."""
    async def run(sql: str, params: tuple[Any, ...]) -> Claim:
        return await _claim(tx.connection, sql, params)

    return await _claim_either(run, tx.restart, scope, key, request, lease, wait)


async def _claim_either(run: Callable[[str, tuple[Any, ...]], Awaitable[Claim]],
                        restart: Callable[[], Awaitable[None]] | None, scope: str, key: str, request: Request,
                        lease: Interval | None, wait: Interval | None) -> Claim:
    """The JSON fingerprint first when the body says JSON, else (or when jsonb refuses it) the bytes one."""
    if request.is_json:
        text = _as_text(request.body)  # None for an empty body too: no round trip that would only fail
        if text is not None:
            try:
                # Latin-1 keeps every byte of the raw target, so two different targets never read the same.
                params = (scope, key, request.method, request.target.decode("latin-1"), text, lease, wait)
                return await run(_CLAIM_JSON, params)
            except psycopg.Error as e:
                if e.sqlstate not in _NOT_JSONB:
                    raise
                if restart is not None:
                    # The failed cast aborted the transaction; it had written nothing yet, so start it afresh
                    # rather than pay a SAVEPOINT on every JSON claim.
                    await restart()
    return await run(_CLAIM_BYTES, (scope, key, request.as_bytes(), lease, wait))


async def _claim(conn: psycopg.AsyncConnection[Any], sql: str, params: tuple[Any, ...]) -> Claim:
    cur = await conn.execute(sql, params)
    row = await cur.fetchone()
    if row is None:  # a SELECT of one function call always returns one row
        raise RuntimeError("idem_claim returned no row")
    outcome, token, status_code, response, headers, retry_after = row
    return Claim(outcome, token, status_code, None if response is None else bytes(response), headers, retry_after)


def _as_text(body: bytes) -> str | None:
    """The body as text for ::jsonb, or None when PostgreSQL could not take it as text at all (invalid UTF-8, or
    a NUL byte, which psycopg refuses before sending) or could only fail as JSON (an empty body): the bytes form
    fingerprints those. The three middlewares apply the same test."""
    if not body or b"\x00" in body:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


async def finish(pool: AsyncConnectionPool[Any], scope: str, key: str, token: int, status: int, body: bytes,
                 headers: Mapping[str, str], retention: Interval | None) -> None:
    async with checkout.statement(pool) as conn:
        await _finish(conn, scope, key, token, status, body, headers, retention)


async def finish_in(tx: Transaction, scope: str, key: str, token: int, status: int, body: bytes,
                    headers: Mapping[str, str], retention: Interval | None) -> None:
    await _finish(tx.connection, scope, key, token, status, body, headers, retention)


async def _finish(conn: psycopg.AsyncConnection[Any], scope: str, key: str, token: int, status: int, body: bytes,
                  headers: Mapping[str, str], retention: Interval | None) -> None:
    await conn.execute(_FINISH, (scope, key, token, status, body or None, json.dumps(headers), retention))


async def release(pool: AsyncConnectionPool[Any], scope: str, key: str, token: int) -> bool:
    """False when the token no longer owns the key: another request took it over, nothing to give back."""
    async with checkout.statement(pool) as conn:
        cur = await conn.execute(_RELEASE, (scope, key, token))
        row = await cur.fetchone()
    return bool(row and row[0])


class Transaction:
    """One request's transaction on one connection taken from the pool (transactional mode): the claim, the
    handler's work and the finish commit together, once, or not at all. `commit` commits; `end` rolls back
    whatever is still open and gives the connection back, and must follow every `take`, whatever happened."""

    def __init__(self, pool: AsyncConnectionPool[Any], conn: psycopg.AsyncConnection[Any]) -> None:
        self._pool = pool
        self.connection = conn
        self.ended = False

    @classmethod
    async def take(cls, pool: AsyncConnectionPool[Any]) -> Transaction:
        """A connection from the pool, for `begin`. Raises psycopg.Error (the pool's PoolTimeout is one)."""
        return cls(pool, await pool.getconn())

    async def begin(self) -> None:
        """Begins the transaction at the pool's default isolation."""
        # Without autocommit psycopg opens the transaction itself with the first statement (with the connection's
        # own isolation_level, if the pool's configure set one); an autocommit connection needs a BEGIN.
        if self.connection.autocommit:
            await self.connection.execute("BEGIN")

    async def restart(self) -> None:
        """Rolls back what this transaction did and begins another on the same connection."""
        await self.connection.rollback()
        await self.begin()

    @property
    def status(self) -> TransactionStatus:
        return self.connection.info.transaction_status

    async def commit(self) -> None:
        """Commits. Raises psycopg.Error when it did not, or may not have (`commit_outcome_unknown` tells which);
        `end` gives the connection back either way."""
        if self.status == TransactionStatus.INERROR:
            # A COMMIT there would answer ROLLBACK without an error: say what it would have done.
            raise psycopg.errors.InFailedSqlTransaction(
                "the transaction was aborted by an earlier error: COMMIT would roll it back")
        if self.status != TransactionStatus.INTRANS:
            # The handler ended the transaction itself (COMMIT, ROLLBACK), or the connection is gone: whatever was
            # committed is not what the middleware was asked to commit, and the claim may be gone.
            raise psycopg.ProgrammingError("the transaction was ended by the handler or with its connection, not "
                                           "by the middleware")
        await self.connection.commit()

    async def end(self) -> None:
        """Rolls back what is still open (nothing written stays) and gives the connection back, idle or closed,
        once. Never raises psycopg.Error, and finishes even when the request is cancelled meanwhile (the
        cancellation goes on after it has begun)."""
        if self.ended:
            return
        self.ended = True
        await checkout.give_back(self._pool, self.connection)


def commit_outcome_unknown(error: psycopg.Error) -> bool:
    """Whether a failed COMMIT may have committed all the same. An error the server sent proves a rollback,
    except class 08 (connection exception), 57P01-57P03 (the server shut the session down: its answer to the
    COMMIT is not the COMMIT's outcome), and a PANIC: a failure inside the commit's critical section (a WAL flush
    that failed, "cannot abort transaction ..., it was already committed"), where the commit may be durable
    already. No SQLSTATE means no answer: the connection was lost or closed while the COMMIT ran."""
    code = error.sqlstate
    if code is None or code.startswith("08") or code in _SESSION_SHUT_DOWN:
        return True
    # The severity as the server wrote it, before translation (PostgreSQL 9.6 and later); the translated one
    # only from an older server, where lc_messages may spell PANIC otherwise.
    severity = error.diag.severity_nonlocalized or error.diag.severity
    return severity == "PANIC"


# admin_shutdown, crash_shutdown, cannot_connect_now.
_SESSION_SHUT_DOWN = frozenset({"57P01", "57P02", "57P03"})
