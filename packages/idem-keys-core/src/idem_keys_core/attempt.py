"""What the handler learns about its claim. Each framework package extends it with what is its own (the
transaction's connection, the database alias)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Attempt:
    """The claim a request runs under."""

    scope: str
    key: str
    outcome: str  # "claimed", or "recovered": the key's previous owner died before it finished
    token: int  # the fencing token: only this attempt may finish or release the key
    _unsettled: bool = field(default=False, init=False, repr=False)

    @property
    def recovered(self) -> bool:
        """True when a previous attempt ran out its lease unfinished: it may have done part of the work, so
        look for what it did (reconcile) before acting."""
        return self.outcome == "recovered"

    def leave_unsettled(self) -> None:
        """Neither store the answer nor release the key: the outcome is unknown (say, the payment provider did
        not answer: maybe charged). The claim runs out its lease and the next request with the key runs with
        `recovered` true. In transactional mode the handler's writes and the claim commit without an answer."""
        self._unsettled = True

    @property
    def unsettled(self) -> bool:
        return self._unsettled
