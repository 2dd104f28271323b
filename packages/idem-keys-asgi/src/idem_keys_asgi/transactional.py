"""Transactional mode: the answer is stored in the transaction that holds the claim and the handler's work, and
the client hears of it only once that transaction committed; what the COMMIT's failure is answered."""
from __future__ import annotations

import psycopg
from idem_keys_core import Problem, outcomes, problems

from . import store
from .attempt import Attempt
from .options import Options
from .transaction import Transaction


async def settle_in(options: Options, tx: Transaction, attempt: Attempt, status: int, headers: dict[str, str],
                    body: bytes) -> Problem | None:
    """The problem to answer instead of the app's, if any."""
    if attempt.unsettled:
        # Its work and the claim commit, no answer stored; the key is recovered once the lease ends.
        return await commit(options, tx, attempt, f"the unsettled {status} answer")
    problem = await _ended_before_commit(options, tx, attempt, f"the {status} answer", problems.STORE_FAILED)
    if problem is not None:
        return problem
    if status in options.retryable_statuses:
        await tx.end()  # rolled back: its work and the claim vanish, the key is free at once
        return None
    try:
        await store.finish_in(tx, attempt.scope, attempt.key, attempt.token, status, body, headers,
                              options.retention)
    except psycopg.Error as e:
        await tx.end()
        return outcomes.finish_refused(options.log, attempt, status, e)
    return await commit(options, tx, attempt, f"the {status} answer")


async def end_after_exception(options: Options, tx: Transaction, attempt: Attempt, e: BaseException) -> None:
    """The app raised before its answer was settled: its work and the claim are rolled back, so the key is free at
    once. Unless it left the key unsettled first (its outcome is unknown, say outside the database): then the
    claim commits as it asked, unfinished, and the key is recovered once its lease ends."""
    if attempt.unsettled and isinstance(e, Exception):
        await commit(options, tx, attempt, "the unsettled claim")  # logged; the exception goes on
        return
    await tx.end()


async def commit(options: Options, tx: Transaction, attempt: Attempt, what: str) -> Problem | None:
    """Commits tx and gives its connection back. The problem to answer when the COMMIT did not succeed:
    commit-failed when nothing was committed (the server's answer proves a rollback, or the connection was lost
    before the COMMIT was sent), commit-unknown when the COMMIT's answer was lost."""
    problem = await _ended_before_commit(options, tx, attempt, what, problems.COMMIT_FAILED)
    if problem is not None:
        return problem
    try:
        await tx.commit()
    except psycopg.Error as e:
        return outcomes.commit_refused(options.log, attempt, what, e)
    except BaseException:
        if tx.open:
            # Cancelled before psycopg sent the COMMIT (once sent, the connection is ACTIVE until its answer, then
            # IDLE): `end` rolls the transaction back.
            options.log.warning("idempotency: %r in %r: cancelled before the COMMIT of %s was sent: nothing was "
                                "committed", attempt.key, attempt.scope, what)
        else:
            # Cancelled while the COMMIT ran: the server may have committed before the cancellation reached it, or
            # psycopg gave up waiting for its answer.
            options.log.error("idempotency: %r in %r: cancelled during the commit of %s, whose outcome is unknown; "
                              "a retry with the same Idempotency-Key tells", attempt.key, attempt.scope, what)
        raise
    finally:
        await tx.end()
    return None


async def _ended_before_commit(options: Options, tx: Transaction, attempt: Attempt, what: str,
                               if_lost: Problem) -> Problem | None:
    """The problem to answer, logged and with the connection given back, when tx ended before the middleware could
    commit it; None when it is still open, aborted or not."""
    if tx.connection.closed:
        # Lost before its COMMIT was sent (the handler went on after a statement that saw the session end):
        # PostgreSQL rolled it all back with the session, so the outcome is known.
        options.log.error("idempotency: %r in %r: the connection was lost before the COMMIT of %s, which was not "
                          "sent: nothing was committed (the server rolled the transaction back with the session)",
                          attempt.key, attempt.scope, what)
        problem = if_lost
    elif not tx.open:
        # The handler committed or rolled back the middleware's transaction: what is committed is not known.
        options.log.error("idempotency: %r in %r: the handler ended the middleware's transaction itself; %s is not "
                          "stored", attempt.key, attempt.scope, what)
        problem = problems.STORE_FAILED
    else:
        return None
    await tx.end()
    return problem
