"""An AWS Lambda Powertools idempotency persistence layer on idem_keys (PostgreSQL), with fencing."""
from .errors import IdemKeysLeaseLostError, lease_lost
from .keys import store_key
from .layer import IdemKeysPersistenceLayer

__version__ = "0.1.0"
__all__ = ["IdemKeysLeaseLostError", "IdemKeysPersistenceLayer", "lease_lost", "store_key"]
