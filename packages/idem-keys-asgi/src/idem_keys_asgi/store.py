"""idem_keys_core's statements, run on psycopg's async pool (docs/integrations.md). By default each runs as its own
committed statement: a claim must be visible to every duplicate before the handler starts, and an answer durable
before the client sees it (two-step mode, docs/api.md). In transactional mode the claim and the finish run on the
request's own connection, inside the transaction that also holds the handler's work (`Transaction`)."""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from idem_keys_core import Claim, Request, Statement, statements

from . import checkout

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from .transaction import Transaction


async def claim(pool: AsyncConnectionPool[Any], scope: str, key: str, request: Request, lease: float | None,
                wait: float | None) -> Claim:
    async def run(statement: Statement) -> Claim:
        async with checkout.statement(pool) as conn:
            return await _claim(conn, statement)

    return await _claim_either(run, None, statements.claim_statements(scope, key, request, lease, wait))


async def claim_in(tx: Transaction, scope: str, key: str, request: Request, lease: float | None,
                   wait: float | None) -> Claim:
    """The claim inside the request's transaction: it commits with the handler's work, or not at all."""
    async def run(statement: Statement) -> Claim:
        return await _claim(tx.connection, statement)

    return await _claim_either(run, tx.restart, statements.claim_statements(scope, key, request, lease, wait))


async def _claim_either(run: Callable[[Statement], Awaitable[Claim]], restart: Callable[[], Awaitable[None]] | None,
                        claims: list[Statement]) -> Claim:
    """Each claim in turn until one is not refused as JSON (the last, the bytes form, always answers)."""
    *json_first, by_bytes = claims
    for statement in json_first:
        try:
            return await run(statement)
        except psycopg.Error as e:
            if not statements.refused_as_json(e.sqlstate):
                raise
            if restart is not None:
                # The failed cast aborted the transaction; it had written nothing yet, so start it afresh rather
                # than pay a SAVEPOINT on every JSON claim.
                await restart()
    return await run(by_bytes)


async def _claim(conn: psycopg.AsyncConnection[Any], statement: Statement) -> Claim:
    cur = await conn.execute(statement.sql, statement.params)
    return statements.claim_from_row(await cur.fetchone())


async def finish(pool: AsyncConnectionPool[Any], scope: str, key: str, token: int, status: int, body: bytes,
                 headers: Mapping[str, str], retention: float | None) -> None:
    async with checkout.statement(pool) as conn:
        await conn.execute(*statements.finish_statement(scope, key, token, status, body, headers, retention))


async def finish_in(tx: Transaction, scope: str, key: str, token: int, status: int, body: bytes,
                    headers: Mapping[str, str], retention: float | None) -> None:
    await tx.connection.execute(*statements.finish_statement(scope, key, token, status, body, headers, retention))


async def release(pool: AsyncConnectionPool[Any], scope: str, key: str, token: int) -> bool:
    """False when the token no longer owns the key: another request took it over, nothing to give back."""
    async with checkout.statement(pool) as conn:
        cur = await conn.execute(*statements.release_statement(scope, key, token))
        return statements.released_from_row(await cur.fetchone())
