"""The request's COMMIT in transactional mode, and what its outcome lets the middleware say: committed (the
view's answer), not committed (`503 commit-failed`), or not known (`503 commit-unknown`)."""
from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, transaction
from psycopg.pq import TransactionStatus

from . import problems, store
from .attempt import Attempt
from .problems import Problem

# admin_shutdown, crash_shutdown, cannot_connect_now: the server shut the session down, so its answer to the
# COMMIT is not the COMMIT's outcome.
_SESSION_SHUT_DOWN = frozenset({"57P01", "57P02", "57P03"})
# Django's words when an atomic(durable=True) is opened inside another atomic block (django/db/transaction.py).
_DURABLE_NESTED = "durable atomic block cannot be nested"


class _RollBack(Exception):
    """Handed to an atomic block's __exit__ to roll it back: Django's own way, without set_rollback's checks."""


_ROLL_BACK = _RollBack()


def commit(log: logging.Logger, attempt: Attempt, atomic: transaction.Atomic, what: str) -> Problem | None:
    """Leaves the request's atomic block: COMMIT, then the on_commit hooks, the attempt's own first. The problem
    to answer instead of the view's answer, if any."""
    problem = _not_committable(log, attempt, atomic, what)
    if problem is not None:
        roll_back(atomic)
        return problem
    try:
        atomic.__exit__(None, None, None)
    except Exception as e:
        if attempt._committed:
            # Django runs the hooks after the COMMIT, and lets a hook's exception through (robust=False): the work
            # is committed all the same, and the stored answer is the one to give. Django skips the hooks after it.
            log.error("idempotency: %r in %r: %s is committed, but an on_commit hook raised", attempt.key,
                      attempt.scope, what, exc_info=e)
            return None
        if not isinstance(e, DatabaseError):
            raise
        if commit_outcome_unknown(e):
            log.error("idempotency: %r in %r: the outcome of the commit of %s is unknown (%s): it may or may not "
                      "have committed; a retry with the same Idempotency-Key replays the stored answer if it did, "
                      "or runs the request afresh if it did not", attempt.key, attempt.scope, what, e)
            return problems.COMMIT_UNKNOWN
        # A serialization failure, a deferred constraint, a read-only standby: on failure Django has rolled back,
        # nothing of the request stays, and the retry runs it again.
        log.warning("idempotency: %r in %r: the transaction of %s could not be committed, nothing was done: %s",
                    attempt.key, attempt.scope, what, e)
        return problems.COMMIT_FAILED
    except BaseException:
        if not attempt._committed:  # the worker is stopping (SystemExit) while the COMMIT ran
            log.error("idempotency: %r in %r: interrupted during the commit of %s, whose outcome is unknown; a "
                      "retry with the same Idempotency-Key tells", attempt.key, attempt.scope, what)
        raise
    return None


def _not_committable(log: logging.Logger, attempt: Attempt, atomic: transaction.Atomic,
                     what: str) -> Problem | None:
    """The problem to answer, logged, when the request's transaction can no longer be committed as it was asked
    to: Django would leave the block without an error and without committing (or PostgreSQL would answer COMMIT
    with ROLLBACK), or send nothing at all."""
    connection = transaction.get_connection(atomic.using)
    raw = connection.connection
    if raw is None or raw.closed:
        # Lost before its COMMIT was sent (the view went on after a statement that saw the session end): the server
        # rolled it all back with the session, so the outcome is known.
        log.error("idempotency: %r in %r: the connection was lost before the COMMIT of %s, which was not sent: "
                  "nothing was committed (the server rolled the transaction back with the session)", attempt.key,
                  attempt.scope, what)
        return problems.COMMIT_FAILED
    status = raw.info.transaction_status
    if status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        # The view ended the transaction itself (a raw COMMIT or ROLLBACK): what is committed is not known.
        log.error("idempotency: %r in %r: the view ended the request's transaction itself; %s is not stored",
                  attempt.key, attempt.scope, what)
        return problems.STORE_FAILED
    if connection.needs_rollback or status == TransactionStatus.INERROR:
        # A statement failed in it: Django would roll back instead of committing, PostgreSQL would answer the
        # COMMIT with ROLLBACK, and neither would raise.
        log.warning("idempotency: %r in %r: the transaction of %s had failed, nothing was done", attempt.key,
                    attempt.scope, what)
        return problems.COMMIT_FAILED
    return None


def roll_back(atomic: transaction.Atomic, error: BaseException = _ROLL_BACK) -> None:
    """Ends the request's atomic block with a ROLLBACK, once (a second call does nothing). Django closes a
    connection whose ROLLBACK failed, then connects again to restore autocommit; when the server is away that
    raises, but the transaction is over all the same, and the next statement connects afresh."""
    if atomic not in transaction.get_connection(atomic.using).atomic_blocks:
        return
    try:
        atomic.__exit__(type(error), error, error.__traceback__)
    except DatabaseError:
        pass


def commit_outcome_unknown(error: DatabaseError) -> bool:
    """Whether a failed COMMIT may have committed all the same. An error the server sent proves a rollback,
    except class 08 (connection exception), 57P01-57P03, and a PANIC: a failure inside the commit's critical
    section (a WAL flush that failed, "cannot abort transaction ..., it was already committed"), where the commit
    may be durable already. No SQLSTATE means no answer: the connection was lost or closed while the COMMIT ran."""
    code = store.sqlstate(error)
    if code is None or code.startswith("08") or code in _SESSION_SHUT_DOWN:
        return True
    return store.severity(error) == "PANIC"


def explain(log: logging.Logger, attempt: Attempt, error: Any) -> None:
    """Says what to do when the view raised because it opened a durable atomic block inside the request's
    transaction, which Django refuses and transactional mode cannot allow: a durable block commits when it
    ends, and the middleware's transaction around it would make that a lie."""
    if attempt.transactional and isinstance(error, RuntimeError) and _DURABLE_NESTED in str(error):
        log.error("idempotency: %r in %r: the view opened transaction.atomic(durable=True) inside the request's "
                  "transaction (transactional mode); mark it transaction.non_atomic_requests(using=%r) to run it "
                  "in the default mode, where its durable block commits on its own", attempt.key, attempt.scope,
                  attempt.using)
