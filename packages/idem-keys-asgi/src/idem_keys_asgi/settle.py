"""The key settled by the handler's complete answer: stored, released or left as the answer says (docs/
integrations.md, "What the handler did"), then the answer sent, or the problem that replaces it. By default each
call commits on its own (two-step mode); transactional.py settles inside the request's transaction."""
from __future__ import annotations

import psycopg
from idem_keys_core import Problem, outcomes
from idem_keys_core.answers import headers_to_store

from . import respond, store, transactional
from .asgi import Message, Send
from .attempt import Attempt
from .options import Options
from .transaction import Transaction


async def settle(options: Options, send: Send, attempt: Attempt, start: Message, body: bytes,
                 tx: Transaction | None) -> None:
    status = int(start["status"])
    if tx is None:
        problem = await _settle_alone(options, attempt, status, start, body)
    else:
        problem = await transactional.settle_in(options, tx, attempt, status, stored_fields(options, start), body)
    if problem is not None:
        await respond.problem(options, send, problem, attempt.outcome)
        return
    await respond.answer(options, send, start, body, attempt.outcome)


async def _settle_alone(options: Options, attempt: Attempt, status: int, start: Message,
                        body: bytes) -> Problem | None:
    """The problem to answer instead of the app's, if any."""
    if attempt.unsettled:
        return None
    if status in options.retryable_statuses:
        await release(options, attempt)
        return None
    try:
        await store.finish(options.pool, attempt.scope, attempt.key, attempt.token, status, body,
                           stored_fields(options, start), options.retention)
    except psycopg.Error as e:
        return outcomes.finish_refused(options.log, attempt, status, e)
    return None


async def release(options: Options, attempt: Attempt) -> None:
    try:
        if not await store.release(options.pool, attempt.scope, attempt.key, attempt.token):
            options.log.info("idempotency: %r in %r was taken over before its release", attempt.key, attempt.scope)
    except psycopg.Error as e:
        # Harmless to the client: the claim then runs out its lease and the next request recovers the key.
        options.log.warning("idempotency: release of %r in %r failed: %s", attempt.key, attempt.scope, e)


def stored_fields(options: Options, start: Message) -> dict[str, str]:
    """The answer's headers that are stored with it."""
    fields = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in start.get("headers", [])]
    return headers_to_store(fields, options.stored_headers)
