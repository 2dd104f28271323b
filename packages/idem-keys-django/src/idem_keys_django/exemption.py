"""Views their author took out of ATOMIC_REQUESTS with `transaction.non_atomic_requests`: they run outside any
transaction of the package's too, in the default mode (three commits), whatever TRANSACTIONAL or ATOMIC_REQUESTS
say. Such a view manages its own transactions: a DRF view's exception answer (DRF rolls back the innermost atomic
block of an ATOMIC_REQUESTS alias, which would be the request's transaction) or an `atomic(durable=True)` block
(refused inside another atomic block) works there as without the package.

The decorator and the mixin mark their own views non-atomic too (they apply ATOMIC_REQUESTS themselves), so the
author's marks are kept apart, under MARK, when they add theirs."""
from __future__ import annotations

from typing import Any

MARK = "_idem_keys_non_atomic_requests"


def non_atomic_requests_of(view: Any) -> frozenset[str]:
    """The aliases the view's author exempted it from ATOMIC_REQUESTS for."""
    own = getattr(view, MARK, None)
    if own is not None:
        return frozenset(own)
    return frozenset(getattr(view, "_non_atomic_requests", ()))


def take_out_of_atomic_requests(view: Any, alias: str) -> None:
    """Django leaves the view's ATOMIC_REQUESTS block on alias to the package, the author's marks kept apart."""
    setattr(view, MARK, non_atomic_requests_of(view))
    view._non_atomic_requests = set(getattr(view, "_non_atomic_requests", set())) | {alias}
