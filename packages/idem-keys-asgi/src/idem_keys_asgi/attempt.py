"""What the handler learns about its claim: idem_keys_core's Attempt, and in transactional mode the connection."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import idem_keys_core

if TYPE_CHECKING:
    import psycopg

    from .transaction import Transaction


@dataclass(eq=False)
class Attempt(idem_keys_core.Attempt):
    """The claim a handler runs under, at `scope["state"]["idempotency"]` (Starlette and FastAPI:
    `request.state.idempotency`): `scope`, `key`, `outcome`, `token`, `recovered`, `leave_unsettled()`."""

    _transaction: Transaction | None = field(default=None, repr=False, kw_only=True)

    @property
    def connection(self) -> psycopg.AsyncConnection[Any] | None:
        """In transactional mode, the connection whose open transaction holds the claim: run the handler's SQL on
        it, and its writes commit with the stored answer, or not at all. Savepoints (`connection.transaction()`)
        are fine; COMMIT and ROLLBACK are the middleware's. None outside the mode, and once the transaction has
        ended (the answer is settled: a background task must take a connection of its own)."""
        tx = self._transaction
        return tx.connection if tx is not None and not tx.ended else None
