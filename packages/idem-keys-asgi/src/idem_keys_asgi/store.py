"""The three SQL calls the middleware makes, bind parameters only (docs/integrations.md). Each runs as its own
committed statement: a claim must be visible to every duplicate before the handler starts, and an answer
durable before the client sees it (two-step mode, docs/api.md)."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

# A duration as psycopg sends it (timedelta) or as PostgreSQL reads it ("30s", "5 minutes").
Interval: TypeAlias = timedelta | str

# Fields by name, never (r).*: a newer idem_result may grow columns.
_CLAIM_JSON = """SELECT (r).outcome, (r).token, (r).status_code, (r).response_bytes, (r).headers, (r).retry_after
  FROM (SELECT idem_claim(%s, %s, jsonb_build_object('method', %s::text, 'target', %s::text, 'body', %s::jsonb),
                          lease => %s::interval, wait => %s::interval) AS r) s"""
_CLAIM_BYTES = """SELECT (r).outcome, (r).token, (r).status_code, (r).response_bytes, (r).headers, (r).retry_after
  FROM (SELECT idem_claim(%s, %s, %s::bytea, lease => %s::interval, wait => %s::interval) AS r) s"""
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


@asynccontextmanager
async def _statement(pool: AsyncConnectionPool[Any]) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection whose statement commits on its own: as it is on an autocommit pool (recommended), or
    wrapped in a transaction of its own when the pool's connections are not autocommit."""
    async with pool.connection() as conn:
        if conn.autocommit:
            yield conn
        else:
            async with conn.transaction():
                yield conn


async def claim(pool: AsyncConnectionPool[Any], scope: str, key: str, request: Request,
                lease: Interval | None, wait: Interval | None) -> Claim:
    if request.is_json:
        text = _as_text(request.body)  # None for an empty body too: no round trip that would only fail
        if text is not None:
            try:
                # Latin-1 keeps every byte of the raw target, so two different targets never read the same.
                params = (scope, key, request.method, request.target.decode("latin-1"), text, lease, wait)
                return await _claim(pool, _CLAIM_JSON, params)
            except psycopg.Error as e:
                if e.sqlstate not in _NOT_JSONB:
                    raise
    return await _claim(pool, _CLAIM_BYTES, (scope, key, request.as_bytes(), lease, wait))


async def _claim(pool: AsyncConnectionPool[Any], sql: str, params: tuple[Any, ...]) -> Claim:
    async with _statement(pool) as conn:
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
    async with _statement(pool) as conn:
        await conn.execute(_FINISH, (scope, key, token, status, body or None, json.dumps(headers), retention))


async def release(pool: AsyncConnectionPool[Any], scope: str, key: str, token: int) -> bool:
    """False when the token no longer owns the key: another request took it over, nothing to give back."""
    async with _statement(pool) as conn:
        cur = await conn.execute(_RELEASE, (scope, key, token))
        row = await cur.fetchone()
    return bool(row and row[0])
