"""The request's COMMIT in transactional mode, and what its outcome lets the middleware say: committed (the
view's answer), not committed (`503 commit-failed`), or not known (`503 commit-unknown`)."""
from __future__ import annotations

from typing import Any

from django.db import DatabaseError, transaction
from idem_keys_core import Problem, outcomes, problems
from idem_keys_core.options import Log
from psycopg.pq import TransactionStatus

from .attempt import Attempt

# Django's words when an atomic(durable=True) is opened inside another atomic block (django/db/transaction.py).
_DURABLE_NESTED = "durable atomic block cannot be nested"


class _RollBack(Exception):
    """Handed to an atomic block's __exit__ to roll it back: Django's own way, without set_rollback's checks."""


_ROLL_BACK = _RollBack()


def commit(log: Log, attempt: Attempt, atomic: transaction.Atomic, what: str) -> Problem | None:
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
        # On a refused COMMIT Django has rolled back: nothing of the request stays, and the retry runs it again.
        return outcomes.commit_refused(log, attempt, what, e)
    except BaseException:
        if not attempt._committed:  # the worker is stopping (SystemExit) while the COMMIT ran
            log.error("idempotency: %r in %r: interrupted during the commit of %s, whose outcome is unknown; a "
                      "retry with the same Idempotency-Key tells", attempt.key, attempt.scope, what)
        raise
    return None


def _not_committable(log: Log, attempt: Attempt, atomic: transaction.Atomic,
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


def explain(log: Log, attempt: Attempt, error: Any) -> None:
    """Says what to do when the view raised because it opened a durable atomic block inside the request's
    transaction, which Django refuses and transactional mode cannot allow: a durable block commits when it
    ends, and the middleware's transaction around it would make that a lie."""
    if attempt.transactional and isinstance(error, RuntimeError) and _DURABLE_NESTED in str(error):
        log.error("idempotency: %r in %r: the view opened transaction.atomic(durable=True) inside the request's "
                  "transaction (transactional mode); mark it transaction.non_atomic_requests(using=%r) to run it "
                  "in the default mode, where its durable block commits on its own", attempt.key, attempt.scope,
                  attempt.using)
