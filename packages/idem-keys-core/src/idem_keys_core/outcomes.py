"""What a refused answer or a failed COMMIT becomes for the client, and how it is logged: the same words from both
Python packages."""
from __future__ import annotations

import logging
from typing import Any, TypeAlias

from . import problems
from .attempt import Attempt
from .errors import commit_outcome_unknown, lease_lost
from .problems import Problem

Log: TypeAlias = "logging.Logger | logging.LoggerAdapter[Any]"


def finish_refused(log: Log, attempt: Attempt, status: int, error: BaseException) -> Problem:
    """idem_finish failed: `409 lease-lost` when another request took the key over, else `500 store-failed`."""
    if lease_lost(error):
        # This request ran past its lease and another took the key over: that one's answer is the one that
        # counts, and a retry gets it.
        log.warning("idempotency: %r in %r: lease lost, the %d answer is dropped", attempt.key, attempt.scope,
                    status)
        return problems.LEASE_LOST
    # Too large (54000) or the database went away: the key stays claimed until its lease ends (in a transaction,
    # the claim is rolled back with everything else instead).
    log.error("idempotency: %r in %r: the %d answer could not be stored: %s", attempt.key, attempt.scope, status,
              error)
    return problems.STORE_FAILED


def commit_refused(log: Log, attempt: Attempt, what: str, error: BaseException) -> Problem:
    """The COMMIT of `what` raised: `503 commit-unknown` when its answer was lost, else `503 commit-failed`."""
    if commit_outcome_unknown(error):
        log.error("idempotency: %r in %r: the outcome of the commit of %s is unknown (%s): it may or may not have "
                  "committed; a retry with the same Idempotency-Key replays the stored answer if it did, or runs "
                  "the request afresh if it did not", attempt.key, attempt.scope, what, error)
        return problems.COMMIT_UNKNOWN
    # A serialization failure, a deferred constraint, a read-only standby: nothing of the request stays, so the
    # retry runs it again.
    log.warning("idempotency: %r in %r: the transaction of %s could not be committed, nothing was done: %s",
                attempt.key, attempt.scope, what, error)
    return problems.COMMIT_FAILED


def unknown_outcome(log: Log, outcome: str) -> Problem:
    """A claim outcome this version does not know (a newer idem_claim's): nothing is run."""
    log.error("idempotency: idem_claim answered outcome %r, unknown to this version", outcome)
    return problems.STORE_UNAVAILABLE
