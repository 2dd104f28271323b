"""One request through the middleware: the key, the scope, the body, the claim (alone, or in the request's
transaction), then the app under the claim with its answer held until the key is settled, or the answer the claim
gives instead (a replay, a duplicate, a mismatch). The rules are docs/integrations.md's."""
from __future__ import annotations

import inspect

import psycopg
from idem_keys_core import Claim, outcomes, parse_idempotency_key, problems

from . import request, respond, settle, store, transactional
from .asgi import ASGIApp, Message, Receive, Scope, Send
from .attempt import Attempt
from .capture import Capture
from .options import Options
from .transaction import Transaction


async def handle(options: Options, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http" or scope["method"].upper() not in options.methods:
        await app(scope, receive, send)
        return
    fields = request.key_fields(scope)
    if not fields:
        if options.required:
            await respond.problem(options, send, problems.KEY_MISSING)
        else:
            await app(scope, receive, send)
        return
    # Several fields could be joined differently by every proxy on the way: refuse rather than guess.
    key = parse_idempotency_key(fields[0].decode("latin-1")) if len(fields) == 1 else None
    if key is None:
        await respond.problem(options, send, problems.KEY_MALFORMED)
        return
    tenant = await _tenant(options, scope)
    if not tenant:
        options.log.error("idempotency: the scope function gave no scope for %s %s", scope["method"],
                          scope.get("path"))
        await respond.problem(options, send, problems.SCOPE_MISSING)
        return

    body = await request.read_body(receive, options.max_body_bytes)
    if body is None:  # the client left before it finished sending: nothing to claim, no one to answer
        return
    if body is request.TOO_LARGE:
        await respond.problem(options, send, problems.BODY_TOO_LARGE)
        return
    fingerprint = request.fingerprinted(scope, body)
    tx: Transaction | None = None
    try:
        if options.is_transactional(scope):
            tx = await Transaction.take(options.pool)
            await tx.begin()
            claim = await store.claim_in(tx, tenant, key, fingerprint, options.lease, options.wait)
        else:
            claim = await store.claim(options.pool, tenant, key, fingerprint, options.lease, options.wait)
    except BaseException as e:
        if tx is not None:
            await tx.end()
        if not isinstance(e, psycopg.Error):
            raise
        options.log.warning("idempotency: claim of %r in %r failed: %s", key, tenant, e)
        await respond.problem(options, send, problems.STORE_UNAVAILABLE)
        return

    if claim.runs and claim.token is not None:
        attempt = Attempt(tenant, key, claim.outcome, claim.token, _transaction=tx)
        await _run(options, app, scope, body, receive, send, attempt, tx)
        return
    if tx is not None:
        await tx.end()  # a replay, a duplicate, a mismatch: the claim wrote nothing
    await _answer_instead(options, send, claim)


async def _tenant(options: Options, scope: Scope) -> str | None:
    tenant = options.scope(scope)
    if inspect.isawaitable(tenant):
        tenant = await tenant
    if tenant is not None and not isinstance(tenant, str):
        raise TypeError(f"the scope function returned {type(tenant).__name__}, not str or None")
    return tenant


async def _answer_instead(options: Options, send: Send, claim: Claim) -> None:
    """The answer to a claim the app does not run under."""
    if claim.outcome == "replay":
        await respond.replay(options, send, claim)
    elif claim.outcome == "in_progress":
        await respond.problem(options, send, problems.in_progress(claim.retry_after), claim.outcome)
    elif claim.outcome == "mismatch":
        await respond.problem(options, send, problems.KEY_REUSED, claim.outcome)
    else:
        await respond.problem(options, send, outcomes.unknown_outcome(options.log, claim.outcome))


async def _run(options: Options, app: ASGIApp, scope: Scope, body: bytes, receive: Receive, send: Send,
               attempt: Attempt, tx: Transaction | None) -> None:
    """Runs the app with the claim, holding its answer until the key is settled."""
    # In place, not a copy: the framework's own layers outside this one (Starlette's error handler) read the same
    # state dict, so they can name the attempt too.
    scope.setdefault("state", {})["idempotency"] = attempt

    async def complete(start: Message, answer_body: bytes) -> None:
        await settle.settle(options, send, attempt, start, answer_body, tx)
    answer = Capture(complete)
    body_sent = False

    async def replay_receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # After the body, only http.disconnect can come: the server's own receive waits for it.
        return await receive()

    try:
        try:
            await app(request.without_response_extensions(scope), replay_receive, answer.send)
        except BaseException as e:
            if tx is not None:
                if not tx.ended:
                    await transactional.end_after_exception(options, tx, attempt, e)
            elif isinstance(e, Exception) and not answer.settled and not attempt.unsettled:
                # Raised before a complete answer: the handler promises nothing happened, so the key goes back. An
                # exception after it (a background task) leaves the settled key alone. Cancellation is not caught:
                # the outcome is unknown, so the claim runs out its lease.
                await settle.release(options, attempt)
            raise
        if not answer.settled:
            # The app returned without a whole answer (a stream cut short). It may have done its work, so the key
            # is not released: it runs out its lease and the next request recovers it. In a transaction, what it
            # did in the database is rolled back with the claim instead: nothing is left to recover.
            options.log.error("idempotency: %r in %r: the app returned without a complete answer", attempt.key,
                              attempt.scope)
            if tx is not None:
                await tx.end()
            if not answer.started:
                await respond.problem(options, send, problems.STORE_FAILED, attempt.outcome)
    finally:
        if tx is not None and not tx.ended:
            # Whatever cut the settling short (an app that swallowed the cancellation of its answer's send): the
            # connection still goes back, rolled back.
            await tx.end()
