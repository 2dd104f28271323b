"""What the layer raises of its own."""
from __future__ import annotations

from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError


class IdemKeysLeaseLostError(IdempotencyPersistenceLayerError):
    """idem_finish refused this invocation's result: its claim's lease ran out and another invocation took the
    key over (SQLSTATE 55000), or the claim is gone (P0002: swept long after its lease ended).

    The function has run, but its result is not stored; the key keeps the new owner's record. Powertools wraps
    every error of `save_success` in its own `IdempotencyPersistenceLayerError("Failed to update record state
    to success in idempotency store", ...)`, so the function's caller gets that, with this error as its
    `__cause__` (`lease_lost()` finds it) and the psycopg error, whose `sqlstate` says which, as this one's.
    """

    def __init__(self, message: str, *, scope: str, key: str, token: int, sqlstate: str | None) -> None:
        super().__init__(message)
        self.scope = scope
        self.key = key
        self.token = token
        self.sqlstate = sqlstate


def lease_lost(error: BaseException) -> IdemKeysLeaseLostError | None:
    """The `IdemKeysLeaseLostError` behind an error a decorated function raised, if there is one: for a caller
    that must tell "my result was refused: another invocation owns this key" from other persistence errors."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, IdemKeysLeaseLostError):
            return current
        seen.add(id(current))
        current = current.__cause__
    return None
