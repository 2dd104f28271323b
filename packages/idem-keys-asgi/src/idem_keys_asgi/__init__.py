"""Idempotency keys for ASGI apps (Starlette, FastAPI) on idem_keys, over psycopg 3's async pool."""
from idem_keys_core import parse_idempotency_key

from .attempt import Attempt
from .middleware import DEFAULT_STORED_HEADERS, IdempotencyMiddleware

__all__ = ["Attempt", "DEFAULT_STORED_HEADERS", "IdempotencyMiddleware", "parse_idempotency_key"]
__version__ = "0.1.0"
