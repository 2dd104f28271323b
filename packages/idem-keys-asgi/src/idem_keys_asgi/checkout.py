"""Connections taken out of the pool and given back, whatever interrupts the request in between.

A cancelled request (asyncio.CancelledError) can be interrupted at every await, and anyio's cancel scopes (which
Starlette's task groups use) interrupt every later await again until the scope is left. A clean-up written as
plain awaits in `finally` is then cut short: the ROLLBACK never runs, or `putconn` is never reached, and the pool
has one connection less for good. So giving back runs as a task of its own, which the request only waits for
(`asyncio.shield`): cancelled again, the request goes on raising, and the task still brings the connection back.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import TransactionStatus

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

# The give-backs still running after their request was cancelled: asyncio keeps only weak references to tasks,
# so without this one could be collected halfway, its connection with it.
_giving_back: set[asyncio.Task[None]] = set()
_log = logging.getLogger("idem_keys_asgi")


async def give_back(pool: AsyncConnectionPool[Any], conn: psycopg.AsyncConnection[Any]) -> None:
    """Gives conn back to pool, idle or closed, and waits for that; the giving back itself is not cancelled."""
    await to_the_end(_idle_or_closed_back(pool, conn))


async def to_the_end(work: Coroutine[Any, Any, None]) -> None:
    """Runs work as a task of its own and waits for it. A cancellation of the caller reaches the caller (it goes
    on raising), never work, which finishes alone."""
    task = asyncio.ensure_future(work)
    _giving_back.add(task)
    task.add_done_callback(_done)
    await asyncio.shield(task)


def _done(task: asyncio.Task[None]) -> None:
    _giving_back.discard(task)
    if not task.cancelled() and task.exception() is not None:
        _log.error("idempotency: a connection could not be given back to the pool", exc_info=task.exception())


async def _idle_or_closed_back(pool: AsyncConnectionPool[Any], conn: psycopg.AsyncConnection[Any]) -> None:
    """Never back into the pool in a transaction, inside a statement, or broken: rolled back to idle, or closed,
    and the pool replaces a closed one (psycopg_pool discards it and opens another)."""
    status = conn.info.transaction_status
    if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        try:
            await conn.rollback()
        except psycopg.Error:
            await conn.close()
    elif status == TransactionStatus.ACTIVE:
        # Interrupted inside a statement whose end psycopg could not wait for: its state is unknown.
        await conn.close()
    await pool.putconn(conn)


@asynccontextmanager
async def statement(pool: AsyncConnectionPool[Any]) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection whose statement commits on its own: as it is on an autocommit pool (recommended), or
    wrapped in a transaction of its own when the pool's connections are not autocommit. Given back as above,
    rather than by `pool.connection()`, whose own ROLLBACK and `putconn` a second cancellation cuts short."""
    conn = await pool.getconn()
    try:
        if conn.autocommit:
            yield conn
        else:
            async with conn.transaction():
                yield conn
    finally:
        await give_back(pool, conn)
