"""What the handler learns about its claim."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from .store import Transaction


@dataclass(eq=False)
class Attempt:
    """The claim a handler runs under, at `scope["state"]["idempotency"]` (Starlette and FastAPI:
    `request.state.idempotency`)."""

    scope: str
    key: str
    outcome: str  # "claimed", or "recovered": the key's previous owner died before it finished
    token: int  # the fencing token: only this attempt may finish or release the key
    _unsettled: bool = field(default=False, init=False, repr=False)
    _transaction: Transaction | None = field(default=None, repr=False, kw_only=True)

    @property
    def connection(self) -> psycopg.AsyncConnection[Any] | None:
        """In transactional mode, the connection whose open transaction holds the claim: run the handler's SQL on
        it, and its writes commit with the stored answer, or not at all. Savepoints (`connection.transaction()`)
        are fine; COMMIT and ROLLBACK are the middleware's. None outside the mode, and once the transaction has
        ended (the answer is settled: a background task must take a connection of its own)."""
        tx = self._transaction
        return tx.connection if tx is not None and not tx.ended else None

    @property
    def recovered(self) -> bool:
        """True when a previous attempt ran out its lease unfinished: it may have done part of the work, so
        look for what it did (reconcile) before acting."""
        return self.outcome == "recovered"

    def leave_unsettled(self) -> None:
        """Neither store the answer nor release the key: the outcome is unknown (say, the payment provider did
        not answer: maybe charged). The claim runs out its lease and the next request with the key runs with
        `recovered` true."""
        self._unsettled = True

    @property
    def unsettled(self) -> bool:
        return self._unsettled
