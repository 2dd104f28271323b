"""One request's transaction on one connection taken from the pool (transactional mode)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import TransactionStatus

from . import checkout

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool


class Transaction:
    """The claim, the handler's work and the finish commit together, once, or not at all. `commit` commits; `end`
    rolls back whatever is still open and gives the connection back, and must follow every `take`, whatever
    happened."""

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

    @property
    def open(self) -> bool:
        """In the transaction, aborted or not: the middleware may still end it itself."""
        return self.status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    async def commit(self) -> None:
        """Commits. Raises psycopg.Error when it did not, or may not have (idem_keys_core.errors'
        `commit_outcome_unknown` tells which); `end` gives the connection back either way."""
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
