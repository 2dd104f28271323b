"""Idempotency keys for Django and Django REST framework on idem_keys, over Django's own database connection.

`IdempotencyMiddleware` (idem_keys_django.middleware), `idempotent` and `IdempotentMixin`
(idem_keys_django.views), configured by settings.IDEM_KEYS; the view reads `request.idempotency`, an `Attempt`."""
from .attempt import Attempt
from .keys import parse_idempotency_key

__all__ = ["Attempt", "parse_idempotency_key"]
__version__ = "0.1.0"
