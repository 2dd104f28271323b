"""What the view learns about its claim: `request.idempotency`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Attempt:
    """The claim a request runs under, at `request.idempotency` (in a DRF view too: DRF's Request hands the
    attribute on)."""

    scope: str
    key: str
    outcome: str  # "claimed", or "recovered": the key's previous owner died before it finished
    token: int  # the fencing token: only this attempt may finish or release the key
    using: str  # the database alias whose connection holds the claim
    transactional: bool  # the claim, the view's SQL on `using` and the answer commit together
    _unsettled: bool = field(default=False, init=False, repr=False)
    _raised: bool = field(default=False, init=False, repr=False)  # the view raised; Django answered its 500
    _error: BaseException | None = field(default=None, init=False, repr=False)  # what it raised
    _committed: bool = field(default=False, init=False, repr=False)  # transactional: its COMMIT succeeded
    _atomic: Any = field(default=None, repr=False, kw_only=True)  # transactional: the open transaction.atomic

    @property
    def recovered(self) -> bool:
        """True when a previous attempt ran out its lease unfinished: it may have done part of the work, so
        look for what it did (reconcile) before acting."""
        return self.outcome == "recovered"

    def leave_unsettled(self) -> None:
        """Neither store the answer nor release the key: the outcome is unknown (say, the payment provider did
        not answer: maybe charged). The claim runs out its lease and the next request with the key runs with
        `recovered` true. In transactional mode the view's writes and the claim commit without an answer."""
        self._unsettled = True

    @property
    def unsettled(self) -> bool:
        return self._unsettled

    def _note_committed(self) -> None:
        self._committed = True
