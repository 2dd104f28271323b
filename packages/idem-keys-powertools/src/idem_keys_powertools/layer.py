"""IdemKeysPersistenceLayer: Powertools' four persistence methods over idem_claim, idem_finish, idem_release and
idem_lookup. The layer keeps no table of its own: a Powertools record is one idem_keys key.

| Powertools                          | idem_keys                                                               |
|-------------------------------------|-------------------------------------------------------------------------|
| idempotency key                     | key (keys.store_key), under the scope given to the constructor          |
| payload hash (payload_validation)   | the request idem_claim fingerprints: another hash is `mismatch`         |
| INPROGRESS, in-progress expiry      | a claim; its lease is the Lambda's remaining time (else `lease`)        |
| COMPLETED, response data            | a finished key: status 200, the response JSON text as bytea             |
| expiry (expires_after_seconds)      | the finish's retention; the record's attributes in its headers jsonb   |
| delete after the function raised    | idem_release with this invocation's token                               |

The fencing token idem_claim returns is kept, per thread, from _put_record to the _update_record or
_delete_record of the same invocation: after a takeover, the stale invocation's finish is refused (55000) and
never replaces the new owner's record.
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord

from .errors import IdemKeysLeaseLostError
from .keys import store_key
from .sql import Answer, Connections

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

# Attribute names in the stored headers object: the same as Powertools' Redis layer's.
EXPIRATION = "expiration"
VALIDATION = "validation"
# idem_finish: object_not_in_prerequisite_state (the token no longer owns the key) and no_data_found (the claim
# is gone: its lease ended long ago and a sweep removed it).
_LEASE_LOST = frozenset({"55000", "P0002"})
MAX_SCOPE_CHARS = 255
# The lease of a claim that Powertools gives no in-progress expiry (no Lambda context registered), unless
# `lease` says otherwise. Long enough for the calls Powertools usually wraps outside Lambda's deadline (a request
# API Gateway gives up on after 29 s, a message SQS redelivers after its default 30 s visibility timeout): their
# retries find the key in progress while the first call may still finish. Short enough that a caller that
# crashed or hung frees its key within a minute, not at the record's expiry (an hour by default).
DEFAULT_LEASE = timedelta(seconds=60)


class _Tokens(threading.local):
    """The fencing tokens this thread's invocations hold, per Powertools key. A stack per key: an invocation
    that takes over a key in the thread of the stale one it replaces (a nested call) holds its own token."""

    def __init__(self) -> None:
        self.by_key: dict[str, list[int]] = {}

    def push(self, idempotency_key: str, token: int) -> None:
        self.by_key.setdefault(idempotency_key, []).append(token)

    def pop(self, idempotency_key: str) -> int | None:
        stack = self.by_key.get(idempotency_key)
        if not stack:
            return None
        token = stack.pop()
        if not stack:
            del self.by_key[idempotency_key]
        return token


class IdemKeysPersistenceLayer(BasePersistenceLayer):
    """A Powertools idempotency persistence layer on idem_keys (the extension or its portable edition).

    Parameters
    ----------
    scope:
        Required: whose keys these are, one per application or tenant (1 to 255 characters). Two layers with
        different scopes never see each other's records.
    pool:
        A `psycopg_pool.ConnectionPool` on a database with idem_keys; autocommit connections
        (`kwargs={"autocommit": True}`) save a BEGIN and a COMMIT per call.
    conninfo:
        Instead of a pool: a connection string; the layer opens one autocommit connection per thread on first
        use, and again after it broke.
    wait:
        How long a duplicate of a running invocation waits for it to end (seconds or a timedelta) before
        Powertools' `IdempotencyAlreadyInProgressError`; it then gets the stored result, or runs if the first
        invocation released the key or ran out its lease. None (the default): no waiting, as Powertools' own layers.
    lease:
        The lease of a claim that has no Lambda remaining time to go by (no Lambda context registered), seconds
        or a timedelta, at least a millisecond; no longer than the record's expiry (`expires_after_seconds`).
        After it another invocation may take the key over. Default: 60 seconds. With a remaining time, the
        lease is that, and this is not used.
    logger:
        Where refused results and lost releases are logged (default: `logging.getLogger("idem_keys_powertools")`).
    """

    def __init__(
        self,
        *,
        scope: str,
        pool: ConnectionPool[Any] | None = None,
        conninfo: str | None = None,
        wait: timedelta | float | None = None,
        lease: timedelta | float = DEFAULT_LEASE,
        logger: logging.Logger | None = None,
    ) -> None:
        if not isinstance(scope, str) or not 0 < len(scope) <= MAX_SCOPE_CHARS:
            raise ValueError(f"scope must be a string of 1 to {MAX_SCOPE_CHARS} characters, not {scope!r}")
        if wait is not None:
            wait = _duration("wait", wait)
            if wait < timedelta(0):
                raise ValueError(f"wait must not be negative, not {wait}")
        lease = _duration("lease", lease)
        if lease < timedelta(milliseconds=1):  # idem_claim refuses a lease of 0
            raise ValueError(f"lease must be at least a millisecond, not {lease}")
        self._db = Connections(pool, conninfo)
        self.scope = scope
        self.wait = wait
        self.lease = lease
        self._wait_ms = None if wait is None else int(wait.total_seconds() * 1000)
        self._lease_without_context_ms = int(lease.total_seconds() * 1000)
        self.logger = logger or logging.getLogger("idem_keys_powertools")
        self._tokens = _Tokens()
        super().__init__()  # type: ignore[no-untyped-call]  # Powertools' __init__ has no annotations

    # --- Powertools' four methods -------------------------------------------------------------------------

    def _put_record(self, data_record: DataRecord) -> None:
        """Claim the key for this invocation, or raise what Powertools expects: ItemAlreadyExists with the
        existing record (so no second read), or ValidationError for another payload."""
        answer = self._db.claim(self.scope, store_key(data_record.idempotency_key),
                                data_record.payload_hash.encode("utf-8"), self._lease_ms(data_record), self._wait_ms)
        if answer.outcome in ("claimed", "recovered"):
            assert answer.token is not None
            self._tokens.push(data_record.idempotency_key, answer.token)
            if answer.outcome == "recovered":
                self.logger.info("idempotency key %s: taken over from an invocation whose lease ran out "
                                 "(its late result will be refused)", data_record.idempotency_key)
            return
        if answer.outcome == "replay":
            record = self._completed(data_record.idempotency_key, answer)
            self._save_to_cache(data_record=record)  # as get_record would have, had it read the record
            raise IdempotencyItemAlreadyExistsError(old_data_record=record)
        if answer.outcome == "in_progress":
            raise IdempotencyItemAlreadyExistsError(
                old_data_record=self._in_progress(data_record.idempotency_key, answer.retry_after))
        if answer.outcome == "mismatch":
            # Powertools' own message; its handler lets this error through from save_inprogress.
            raise IdempotencyValidationError("Payload does not match stored record for this event key")
        raise IdempotencyPersistenceLayerError(f"idem_claim answered an unknown outcome {answer.outcome!r}")

    def _update_record(self, data_record: DataRecord) -> None:
        """Store the result under this invocation's token (Powertools calls this only for COMPLETED)."""
        token = self._tokens.pop(data_record.idempotency_key)
        if token is None:
            raise IdempotencyPersistenceLayerError(
                f"no claim of this invocation for idempotency key {data_record.idempotency_key}: "
                "a result is stored only by the invocation that claimed the key")
        key = store_key(data_record.idempotency_key)
        headers = {EXPIRATION: data_record.expiry_timestamp, VALIDATION: data_record.payload_hash}
        try:
            self._db.finish(self.scope, key, token, data_record.response_data.encode("utf-8"), headers,
                            self.expires_after_seconds * 1000)
        except psycopg.Error as e:
            if e.sqlstate not in _LEASE_LOST:
                raise
            self.logger.warning("idempotency key %s: result refused (SQLSTATE %s): the lease ran out and another "
                                "invocation took the key over", data_record.idempotency_key, e.sqlstate)
            raise IdemKeysLeaseLostError(
                f"result refused for idempotency key {data_record.idempotency_key}: this invocation's lease ran "
                "out and another invocation owns the key", scope=self.scope, key=key, token=token,
                sqlstate=e.sqlstate) from e

    def _delete_record(self, data_record: DataRecord) -> None:
        """Give the key back after the function raised, if this invocation still holds it. Never raises for a
        key it no longer holds: that would replace the function's own exception."""
        token = self._tokens.pop(data_record.idempotency_key)
        if token is None:
            self.logger.debug("idempotency key %s: no claim of this invocation to release",
                              data_record.idempotency_key)
            return
        try:
            released = self._db.release(self.scope, store_key(data_record.idempotency_key), token)
        except psycopg.Error as e:
            if e.sqlstate != "P0002":
                raise
            released = False
        if not released:
            self.logger.warning("idempotency key %s: not released: another invocation took it over",
                                data_record.idempotency_key)

    def _get_record(self, idempotency_key: str) -> DataRecord:
        """The record as idem_lookup sees it. Powertools reads a record only when _put_record raised without
        one, which this layer does not do, or for a key its local cache holds; kept for completeness."""
        answer = self._db.lookup(self.scope, store_key(idempotency_key))
        if answer.outcome == "replay":
            return self._completed(idempotency_key, answer)
        if answer.outcome == "in_progress":
            return self._in_progress(idempotency_key, answer.retry_after)
        raise IdempotencyItemNotFoundError

    # --- from idem_keys to Powertools --------------------------------------------------------------------------

    def _lease_ms(self, data_record: DataRecord) -> int:
        """The claim's lease: the Lambda's remaining time, as Powertools' in-progress expiry, but no longer
        than the record's expiry, which ends an in-progress record in Powertools' DynamoDB layer too. Without a
        Lambda context (no in-progress expiry), `lease`, no longer than the expiry either."""
        expiry_ms = self.expires_after_seconds * 1000
        if data_record.in_progress_expiry_timestamp is None:
            return min(expiry_ms, self._lease_without_context_ms)
        remaining_ms = int(data_record.in_progress_expiry_timestamp - time.time() * 1000)
        # A Lambda about to be killed (0 ms left): the shortest lease idem_keys takes, so a retry takes over.
        return min(expiry_ms, max(remaining_ms, 1))

    def _completed(self, idempotency_key: str, answer: Answer) -> DataRecord:
        attributes = answer.headers or {}
        now = int(time.time())
        # The server's clock decided that the record is live: one it still replays is never reported EXPIRED
        # because the function's clock runs ahead (Powertools would call that an inconsistent state).
        stored = attributes.get(EXPIRATION)
        expiry = max(int(stored), now + 1) if stored is not None else now + 1
        return DataRecord(
            idempotency_key=idempotency_key,
            status=STATUS_CONSTANTS["COMPLETED"],
            expiry_timestamp=expiry,
            response_data=answer.response.decode("utf-8") if answer.response is not None else "",
            payload_hash=str(attributes.get(VALIDATION, "")),
        )

    @staticmethod
    def _in_progress(idempotency_key: str, retry_after: int | None) -> DataRecord:
        now_ms = int(time.time() * 1000)
        # retry_after: whole seconds left on the owner's lease, rounded up (idem_claim: at least 1); 0 from
        # idem_lookup once it has ended, which Powertools reads as a record to retry the claim for.
        lease_ends_ms = now_ms + retry_after * 1000 if retry_after else now_ms - 1
        return DataRecord(
            idempotency_key=idempotency_key,
            status=STATUS_CONSTANTS["INPROGRESS"],
            in_progress_expiry_timestamp=lease_ends_ms,
        )


def _duration(name: str, value: timedelta | float) -> timedelta:
    """A duration option given as seconds or a timedelta."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be a finite number of seconds, not {value}")
    return timedelta(seconds=value)
