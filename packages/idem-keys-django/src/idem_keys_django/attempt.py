"""What the view learns about its claim: `request.idempotency`, idem_keys_core's Attempt with the database alias
and the mode."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import idem_keys_core


@dataclass(eq=False)
class Attempt(idem_keys_core.Attempt):
    """The claim a request runs under, at `request.idempotency` (in a DRF view too: DRF's Request hands the
    attribute on): `scope`, `key`, `outcome`, `token`, `recovered`, `leave_unsettled()`, and:"""

    using: str  # the database alias whose connection holds the claim
    transactional: bool  # the claim, the view's SQL on `using` and the answer commit together
    _raised: bool = field(default=False, init=False, repr=False)  # the view raised; Django answered its 500
    _error: BaseException | None = field(default=None, init=False, repr=False)  # what it raised
    _committed: bool = field(default=False, init=False, repr=False)  # transactional: its COMMIT succeeded
    _atomic: Any = field(default=None, repr=False, kw_only=True)  # transactional: the open transaction.atomic

    def _note_committed(self) -> None:
        self._committed = True
