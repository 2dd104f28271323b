"""IdempotencyMiddleware: a pure ASGI middleware (no BaseHTTPMiddleware), so it sees every message and can hold
the handler's answer until it is stored. The rules it follows are docs/integrations.md's."""
from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from psycopg.pq import TransactionStatus

from . import problems, store
from .attempt import Attempt
from .keys import parse_idempotency_key
from .problems import Problem

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]
ScopeFunction: TypeAlias = Callable[[Scope], "str | None | Awaitable[str | None]"]
Transactional: TypeAlias = bool | Callable[[Scope], bool]
Duration: TypeAlias = timedelta | str | float

DEFAULT_STORED_HEADERS = ("Content-Type", "Content-Language", "Content-Location", "Location", "ETag", "Link")
# The framing of an answer is the server's to compute on every send, never something to replay.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})


class IdempotencyMiddleware:
    """Runs a request that carries an Idempotency-Key at most once per key and scope, and answers every retry
    with the first answer.

    `pool` is a psycopg 3 `AsyncConnectionPool`; autocommit connections (`kwargs={"autocommit": True}`) save a
    BEGIN/COMMIT per call, and any other pool works too. `scope(asgi_scope)`, sync or async, names whose keys
    these are (a tenant, from authentication; never a header the client sets); None means it cannot tell.
    Durations (`lease`, `wait`, `retention`) are a `timedelta`, seconds, or a PostgreSQL interval string; None
    takes the server's setting (`wait`: no waiting).

    `transactional` (True, or `transactional(asgi_scope) -> bool` to pick routes) runs the claim, the handler and
    the finish in one transaction on one connection of the pool, committed once after the handler answered: the
    handler runs its SQL on `request.state.idempotency.connection`, and its writes commit with the stored answer,
    or not at all. It must not COMMIT or ROLLBACK that transaction itself (savepoints are fine).
    """

    def __init__(self, app: ASGIApp, *, pool: AsyncConnectionPool[Any], scope: ScopeFunction,
                 lease: Duration | None = None, wait: Duration | None = None, retention: Duration | None = None,
                 methods: Iterable[str] = ("POST", "PATCH"), required: bool = True,
                 retryable_statuses: Iterable[int] = (429, 503),
                 stored_headers: Iterable[str] = DEFAULT_STORED_HEADERS, outcome_header: str | None = None,
                 logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
                 max_body_bytes: int = 1 << 20, transactional: Transactional = False) -> None:
        # No default scope: one shared by every tenant would let one tenant's key answer another's request.
        if not callable(scope):
            raise TypeError("IdempotencyMiddleware needs scope=, a function of the ASGI scope giving its tenant")
        if pool is None:
            raise TypeError("IdempotencyMiddleware needs pool=, a psycopg_pool.AsyncConnectionPool")
        self.app = app
        self._pool = pool
        self._scope_of = scope
        self._lease = _duration("lease", lease, allow_zero=False)
        self._wait = _duration("wait", wait, allow_zero=True) or None  # 0 and None both mean "do not wait"
        self._retention = _duration("retention", retention, allow_zero=False)
        self._methods = frozenset(m.upper() for m in methods)
        self._required = required
        self._retryable = frozenset(retryable_statuses)
        self._stored = {name.lower(): name for name in stored_headers}
        if _FRAMING_HEADERS & self._stored.keys():
            raise ValueError("stored_headers: Content-Length and Transfer-Encoding are recomputed on every answer")
        self._outcome_header = outcome_header.lower().encode("latin-1") if outcome_header else None
        self._log = logger or logging.getLogger("idem_keys_asgi")
        if max_body_bytes <= 0:
            raise ValueError("max_body_bytes must be positive")
        # The body is held whole in memory for the fingerprint, before any limit of the app's applies.
        self._max_body = max_body_bytes
        if not isinstance(transactional, bool) and not callable(transactional):
            raise TypeError(f"transactional: True, False or a function of the ASGI scope, not {transactional!r}")
        # The mode takes a connection out of the pool for the whole request: a sync pool, or anything else
        # without the async getconn/putconn pair, would fail at the first request, so it fails here instead.
        if transactional is not False and not all(inspect.iscoroutinefunction(getattr(pool, name, None))
                                                  for name in ("getconn", "putconn")):
            raise TypeError("transactional: pool= must be a psycopg_pool.AsyncConnectionPool (async getconn and "
                            f"putconn), not {type(pool).__name__}")
        self._transactional = transactional

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"].upper() not in self._methods:
            await self.app(scope, receive, send)
            return
        fields = [value for name, value in scope["headers"] if name.lower() == b"idempotency-key"]
        if not fields:
            if self._required:
                await self._problem(send, problems.KEY_MISSING)
            else:
                await self.app(scope, receive, send)
            return
        # Several fields could be joined differently by every proxy on the way: refuse rather than guess.
        key = parse_idempotency_key(fields[0].decode("latin-1")) if len(fields) == 1 else None
        if key is None:
            await self._problem(send, problems.KEY_MALFORMED)
            return
        tenant = self._scope_of(scope)
        if inspect.isawaitable(tenant):
            tenant = await tenant
        if tenant is not None and not isinstance(tenant, str):
            raise TypeError(f"the scope function returned {type(tenant).__name__}, not str or None")
        if not tenant:
            self._log.error("idempotency: the scope function gave no scope for %s %s", scope["method"],
                            scope.get("path"))
            await self._problem(send, problems.SCOPE_MISSING)
            return

        body = await _read_body(receive, self._max_body)
        if body is None:  # the client left before it finished sending: nothing to claim, no one to answer
            return
        if body is _TOO_LARGE:
            await self._problem(send, problems.BODY_TOO_LARGE)
            return
        request = store.Request(scope["method"], _target(scope), body, _is_json(scope))
        tx: store.Transaction | None = None
        try:
            if self._is_transactional(scope):
                tx = await store.Transaction.take(self._pool)
                await tx.begin()
                claim = await store.claim_in(tx, tenant, key, request, self._lease, self._wait)
            else:
                claim = await store.claim(self._pool, tenant, key, request, self._lease, self._wait)
        except BaseException as e:
            if tx is not None:
                await tx.end()
            if not isinstance(e, psycopg.Error):
                raise
            self._log.warning("idempotency: claim of %r in %r failed: %s", key, tenant, e)
            await self._problem(send, problems.STORE_UNAVAILABLE)
            return

        if claim.outcome in ("claimed", "recovered") and claim.token is not None:
            attempt = Attempt(tenant, key, claim.outcome, claim.token, _transaction=tx)
            await self._run(scope, body, receive, send, attempt, tx)
            return
        if tx is not None:
            await tx.end()  # a replay, a duplicate, a mismatch: the claim wrote nothing
        if claim.outcome == "replay":
            await self._replay(send, claim)
        elif claim.outcome == "in_progress":
            await self._problem(send, problems.in_progress(claim.retry_after), claim.outcome)
        elif claim.outcome == "mismatch":
            await self._problem(send, problems.KEY_REUSED, claim.outcome)
        else:
            self._log.error("idempotency: idem_claim answered outcome %r, unknown to this version", claim.outcome)
            await self._problem(send, problems.STORE_UNAVAILABLE)

    def _is_transactional(self, scope: Scope) -> bool:
        if isinstance(self._transactional, bool):
            return self._transactional
        return bool(self._transactional(scope))

    async def _run(self, scope: Scope, body: bytes, receive: Receive, send: Send, attempt: Attempt,
                   tx: store.Transaction | None) -> None:
        """Runs the app with the claim, holding its answer until the key is settled."""
        # In place, not a copy: the framework's own layers outside this one (Starlette's error handler) read
        # the same state dict, so they can name the attempt too.
        scope.setdefault("state", {})["idempotency"] = attempt
        answer = _Answer(self, send, attempt, tx)
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
                await self.app(_without_response_extensions(scope), replay_receive, answer.send)
            except BaseException as e:
                if tx is not None:
                    if not tx.ended:
                        await self._end_after_exception(tx, attempt, e)
                elif isinstance(e, Exception) and not answer.settled and not attempt.unsettled:
                    # Raised before a complete answer: the handler promises nothing happened, so the key goes
                    # back. An exception after it (a background task) leaves the settled key alone. Cancellation
                    # is not caught: the outcome is unknown, so the claim runs out its lease.
                    await self._release(attempt)
                raise
            if not answer.settled:
                # The app returned without a whole answer (a stream cut short). It may have done its work, so the
                # key is not released: it runs out its lease and the next request recovers it. In a transaction,
                # what it did in the database is rolled back with the claim instead: nothing is left to recover.
                self._log.error("idempotency: %r in %r: the app returned without a complete answer", attempt.key,
                                attempt.scope)
                if tx is not None:
                    await tx.end()
                if not answer.started:
                    await self._problem(send, problems.STORE_FAILED, attempt.outcome)
        finally:
            if tx is not None and not tx.ended:
                # Whatever cut the settling short (an app that swallowed the cancellation of its answer's send):
                # the connection still goes back, rolled back.
                await tx.end()

    async def _settle(self, send: Send, attempt: Attempt, start: Message, body: bytes,
                      tx: store.Transaction | None) -> None:
        """Stores, releases or leaves the key as the answer says, then sends the answer (or what replaces it)."""
        status = int(start["status"])
        if tx is None:
            problem = await self._settle_alone(attempt, status, start, body)
        else:
            problem = await self._settle_in(tx, attempt, status, start, body)
        if problem is not None:
            await self._problem(send, problem, attempt.outcome)
            return
        headers = list(start.get("headers", []))
        if self._outcome_header:
            headers.append((self._outcome_header, attempt.outcome.encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _settle_alone(self, attempt: Attempt, status: int, start: Message, body: bytes) -> Problem | None:
        """Two-step mode: each call commits on its own. The problem to answer instead of the app's, if any."""
        if attempt.unsettled:
            return None
        if status in self._retryable:
            await self._release(attempt)
            return None
        try:
            await store.finish(self._pool, attempt.scope, attempt.key, attempt.token, status, body,
                               self._headers_to_store(start), self._retention)
        except psycopg.Error as e:
            return self._finish_failed(attempt, status, e)
        return None

    async def _settle_in(self, tx: store.Transaction, attempt: Attempt, status: int, start: Message,
                         body: bytes) -> Problem | None:
        """Transactional mode: the answer is stored in the transaction that holds the claim and the handler's
        work, and the client hears of it only once that transaction committed."""
        if attempt.unsettled:
            # Its work and the claim commit, no answer stored; the key is recovered once the lease ends.
            return await self._commit(tx, attempt, f"the unsettled {status} answer")
        problem = await self._ended_before_commit(tx, attempt, f"the {status} answer", problems.STORE_FAILED)
        if problem is not None:
            return problem
        if status in self._retryable:
            await tx.end()  # rolled back: its work and the claim vanish, the key is free at once
            return None
        try:
            await store.finish_in(tx, attempt.scope, attempt.key, attempt.token, status, body,
                                  self._headers_to_store(start), self._retention)
        except psycopg.Error as e:
            await tx.end()
            return self._finish_failed(attempt, status, e)
        return await self._commit(tx, attempt, f"the {status} answer")

    async def _ended_before_commit(self, tx: store.Transaction, attempt: Attempt, what: str,
                                   if_lost: Problem) -> Problem | None:
        """The problem to answer, logged and with the connection given back, when tx ended before the middleware
        could commit it; None when it is still open, aborted or not."""
        if tx.connection.closed:
            # Lost before its COMMIT was sent (the handler went on after a statement that saw the session end):
            # PostgreSQL rolled it all back with the session, so the outcome is known.
            self._log.error("idempotency: %r in %r: the connection was lost before the COMMIT of %s, which was not "
                            "sent: nothing was committed (the server rolled the transaction back with the session)",
                            attempt.key, attempt.scope, what)
            problem = if_lost
        elif tx.status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            # The handler committed or rolled back the middleware's transaction: what is committed is not known.
            self._log.error("idempotency: %r in %r: the handler ended the middleware's transaction itself; %s is not "
                            "stored", attempt.key, attempt.scope, what)
            problem = problems.STORE_FAILED
        else:
            return None
        await tx.end()
        return problem

    async def _commit(self, tx: store.Transaction, attempt: Attempt, what: str) -> Problem | None:
        """Commits tx and gives its connection back. The problem to answer when the COMMIT did not succeed:
        commit-failed when nothing was committed (the server's answer proves a rollback, or the connection was lost
        before the COMMIT was sent), commit-unknown when the COMMIT's answer was lost."""
        problem = await self._ended_before_commit(tx, attempt, what, problems.COMMIT_FAILED)
        if problem is not None:
            return problem
        try:
            await tx.commit()
        except psycopg.Error as e:
            if store.commit_outcome_unknown(e):
                self._log.error("idempotency: %r in %r: the outcome of the commit of %s is unknown (%s): it may or "
                                "may not have committed; a retry with the same Idempotency-Key replays the stored "
                                "answer if it did, or runs the request afresh if it did not", attempt.key,
                                attempt.scope, what, e)
                return problems.COMMIT_UNKNOWN
            # A serialization failure, a deferred constraint, a read-only standby: nothing of the request stays,
            # so the retry runs it again.
            self._log.warning("idempotency: %r in %r: the transaction of %s could not be committed, nothing was "
                              "done: %s", attempt.key, attempt.scope, what, e)
            return problems.COMMIT_FAILED
        except BaseException:
            if tx.status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                # Cancelled before psycopg sent the COMMIT (once sent, the connection is ACTIVE until its answer,
                # then IDLE): `end` rolls the transaction back.
                self._log.warning("idempotency: %r in %r: cancelled before the COMMIT of %s was sent: nothing was "
                                  "committed", attempt.key, attempt.scope, what)
            else:
                # Cancelled while the COMMIT ran: the server may have committed before the cancellation reached
                # it, or psycopg gave up waiting for its answer.
                self._log.error("idempotency: %r in %r: cancelled during the commit of %s, whose outcome is "
                                "unknown; a retry with the same Idempotency-Key tells", attempt.key, attempt.scope,
                                what)
            raise
        finally:
            await tx.end()
        return None

    def _finish_failed(self, attempt: Attempt, status: int, e: psycopg.Error) -> Problem:
        if e.sqlstate == store.LEASE_LOST_SQLSTATE:
            # This request ran past its lease and another took the key over: that one's answer is the one that
            # counts, and a retry gets it.
            self._log.warning("idempotency: %r in %r: lease lost, the %d answer is dropped", attempt.key,
                              attempt.scope, status)
            return problems.LEASE_LOST
        # Too large (54000) or the database went away: the key stays claimed until its lease ends (in a
        # transaction, the claim is rolled back with everything else instead).
        self._log.error("idempotency: %r in %r: the %d answer could not be stored: %s", attempt.key, attempt.scope,
                        status, e)
        return problems.STORE_FAILED

    async def _end_after_exception(self, tx: store.Transaction, attempt: Attempt, e: BaseException) -> None:
        """The app raised before its answer was settled: its work and the claim are rolled back, so the key is
        free at once. Unless it left the key unsettled first (its outcome is unknown, say outside the database):
        then the claim commits as it asked, unfinished, and the key is recovered once its lease ends."""
        if attempt.unsettled and isinstance(e, Exception):
            await self._commit(tx, attempt, "the unsettled claim")  # logged; the exception goes on
            return
        await tx.end()

    async def _release(self, attempt: Attempt) -> None:
        try:
            if not await store.release(self._pool, attempt.scope, attempt.key, attempt.token):
                self._log.info("idempotency: %r in %r was taken over before its release", attempt.key,
                               attempt.scope)
        except psycopg.Error as e:
            # Harmless to the client: the claim then runs out its lease and the next request recovers the key.
            self._log.warning("idempotency: release of %r in %r failed: %s", attempt.key, attempt.scope, e)

    def _headers_to_store(self, start: Message) -> dict[str, str]:
        stored: dict[str, str] = {}
        for name, value in start.get("headers", []):
            canonical = self._stored.get(name.decode("latin-1").lower())
            if canonical is not None:
                text = value.decode("latin-1")
                stored[canonical] = f"{stored[canonical]}, {text}" if canonical in stored else text
        return stored

    async def _replay(self, send: Send, claim: store.Claim) -> None:
        body = claim.response or b""
        headers = [(name.lower().encode("latin-1"), str(value).encode("latin-1"))
                   for name, value in (claim.headers or {}).items() if name.lower() not in _FRAMING_HEADERS]
        headers += [(b"content-length", str(len(body)).encode()), (b"idempotent-replayed", b"true")]
        if self._outcome_header:
            headers.append((self._outcome_header, claim.outcome.encode()))
        await send({"type": "http.response.start", "status": claim.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _problem(self, send: Send, problem: Problem, outcome: str | None = None) -> None:
        body = problem.body()
        headers = problem.headers(len(body))
        if outcome and self._outcome_header:
            headers.append((self._outcome_header, outcome.encode()))
        await send({"type": "http.response.start", "status": problem.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


class _Answer:
    """The app's send while it runs: holds the answer until it is complete, then settles the key and sends it
    from inside that last send, so whatever the app does after its answer (background tasks) runs after the
    client has it, as without the middleware."""

    def __init__(self, middleware: IdempotencyMiddleware, send: Send, attempt: Attempt,
                 tx: store.Transaction | None) -> None:
        self._middleware, self._send, self._attempt, self._tx = middleware, send, attempt, tx
        self._start: Message | None = None
        self._body: list[bytes] = []
        self.settled = False

    @property
    def started(self) -> bool:
        return self._start is not None

    async def send(self, message: Message) -> None:
        if self.settled:
            return
        if message["type"] == "http.response.start":
            self._start = message
        elif message["type"] == "http.response.body" and self._start is not None:
            self._body.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                self.settled = True
                await self._middleware._settle(self._send, self._attempt, self._start, b"".join(self._body),
                                               self._tx)


# _read_body's answer for a body over the limit (the rest is not read: the server discards it).
_TOO_LARGE = b"\x00too large"


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body: the fingerprint covers it. None if the client disconnected first, _TOO_LARGE if
    it is longer than limit."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        if message["type"] == "http.request":
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > limit:
                return _TOO_LARGE
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _target(scope: Scope) -> bytes:
    """Path and query as the client sent them: raw, not decoded, so /a%2Fb and /a/b stay two requests."""
    path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    query: bytes = scope.get("query_string", b"")
    return path + b"?" + query if query else path


def _is_json(scope: Scope) -> bool:
    """A JSON media type (application/json, application/*+json) on a body that is not compressed (no
    Content-Encoding, or identity): a compressed JSON body counts by its bytes, in all three middlewares."""
    media, encoding = "", "identity"
    for name, value in scope["headers"]:
        lowered = name.lower()
        if lowered == b"content-type":
            media = value.decode("latin-1").split(";", 1)[0].strip().lower()
        elif lowered == b"content-encoding":
            encoding = value.decode("latin-1").strip().lower() or "identity"
    json_type = media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
    return json_type and encoding == "identity"


def _without_response_extensions(scope: Scope) -> Scope:
    """The scope without the server's http.response.* extensions (pathsend, zerocopysend, trailers, ...): each
    sends an answer some other way than http.response.body, which this middleware could not hold and store."""
    extensions = scope.get("extensions")
    if not extensions or not any(name.startswith("http.response.") for name in extensions):
        return scope
    return {**scope, "extensions": {name: value for name, value in extensions.items()
                                    if not name.startswith("http.response.")}}


def _duration(option: str, value: Duration | None, *, allow_zero: bool) -> store.Interval | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        raise TypeError(f"{option}: a timedelta, seconds or a PostgreSQL interval string, not {value!r}")
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        raise ValueError(f"{option} must be {'at least' if allow_zero else 'more than'} zero, not {value}")
    return value
