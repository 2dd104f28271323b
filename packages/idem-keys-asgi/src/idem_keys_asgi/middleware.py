"""IdempotencyMiddleware: a pure ASGI middleware (no BaseHTTPMiddleware), so it sees every message and can hold
the handler's answer until it is stored. The rules it follows are docs/integrations.md's."""
from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg

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
    """

    def __init__(self, app: ASGIApp, *, pool: AsyncConnectionPool[Any], scope: ScopeFunction,
                 lease: Duration | None = None, wait: Duration | None = None, retention: Duration | None = None,
                 methods: Iterable[str] = ("POST", "PATCH"), required: bool = True,
                 retryable_statuses: Iterable[int] = (429, 503),
                 stored_headers: Iterable[str] = DEFAULT_STORED_HEADERS, outcome_header: str | None = None,
                 logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
                 max_body_bytes: int = 1 << 20) -> None:
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
        try:
            claim = await store.claim(self._pool, tenant, key, request, self._lease, self._wait)
        except psycopg.Error as e:
            self._log.warning("idempotency: claim of %r in %r failed: %s", key, tenant, e)
            await self._problem(send, problems.STORE_UNAVAILABLE)
            return

        if claim.outcome == "replay":
            await self._replay(send, claim)
        elif claim.outcome == "in_progress":
            await self._problem(send, problems.in_progress(claim.retry_after), claim.outcome)
        elif claim.outcome == "mismatch":
            await self._problem(send, problems.KEY_REUSED, claim.outcome)
        elif claim.outcome in ("claimed", "recovered") and claim.token is not None:
            attempt = Attempt(tenant, key, claim.outcome, claim.token)
            await self._run(scope, body, receive, send, attempt)
        else:
            self._log.error("idempotency: idem_claim answered outcome %r, unknown to this version", claim.outcome)
            await self._problem(send, problems.STORE_UNAVAILABLE)

    async def _run(self, scope: Scope, body: bytes, receive: Receive, send: Send, attempt: Attempt) -> None:
        """Runs the app with the claim, holding its answer until the key is settled."""
        # In place, not a copy: the framework's own layers outside this one (Starlette's error handler) read
        # the same state dict, so they can name the attempt too.
        scope.setdefault("state", {})["idempotency"] = attempt
        answer = _Answer(self, send, attempt)
        body_sent = False

        async def replay_receive() -> Message:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            # After the body, only http.disconnect can come: the server's own receive waits for it.
            return await receive()

        try:
            await self.app(_without_response_extensions(scope), replay_receive, answer.send)
        except Exception:
            # Raised before a complete answer: the handler promises nothing happened, so the key goes back. An
            # exception after it (a background task) leaves the settled key alone. BaseException (cancellation)
            # is not caught: the outcome is unknown, so the claim runs out its lease.
            if not answer.settled and not attempt.unsettled:
                await self._release(attempt)
            raise
        if not answer.settled:
            # The app returned without a whole answer (a stream cut short). It may have done its work, so the key
            # is not released: it runs out its lease and the next request recovers it.
            self._log.error("idempotency: %r in %r: the app returned without a complete answer", attempt.key,
                            attempt.scope)
            if not answer.started:
                await self._problem(send, problems.STORE_FAILED, attempt.outcome)

    async def _settle(self, send: Send, attempt: Attempt, start: Message, body: bytes) -> None:
        """Stores, releases or leaves the key as the answer says, then sends the answer (or what replaces it)."""
        status = int(start["status"])
        if attempt.unsettled:
            pass
        elif status in self._retryable:
            await self._release(attempt)
        else:
            try:
                await store.finish(self._pool, attempt.scope, attempt.key, attempt.token, status, body,
                                   self._headers_to_store(start), self._retention)
            except psycopg.Error as e:
                if e.sqlstate == store.LEASE_LOST_SQLSTATE:
                    # This request ran past its lease and another took the key over: that one's answer is the
                    # one that counts, and a retry gets it.
                    self._log.warning("idempotency: %r in %r: lease lost, the %d answer is dropped", attempt.key,
                                      attempt.scope, status)
                    await self._problem(send, problems.LEASE_LOST, attempt.outcome)
                else:
                    # Too large (54000) or the database went away: the key stays claimed until its lease ends.
                    self._log.error("idempotency: %r in %r: the %d answer could not be stored: %s", attempt.key,
                                    attempt.scope, status, e)
                    await self._problem(send, problems.STORE_FAILED, attempt.outcome)
                return
        headers = list(start.get("headers", []))
        if self._outcome_header:
            headers.append((self._outcome_header, attempt.outcome.encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

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

    def __init__(self, middleware: IdempotencyMiddleware, send: Send, attempt: Attempt) -> None:
        self._middleware, self._send, self._attempt = middleware, send, attempt
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
                await self._middleware._settle(self._send, self._attempt, self._start, b"".join(self._body))


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
