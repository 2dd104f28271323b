"""IdempotencyMiddleware: a pure ASGI middleware (no BaseHTTPMiddleware), so it sees every message and can hold
the handler's answer until it is stored. Its options are options.py's; a request's way through it, flow.py's."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import flow, options
from .asgi import ASGIApp, Receive, Scope, Send
from .options import DEFAULT_STORED_HEADERS, Duration, ScopeFunction, Transactional

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

__all__ = ["DEFAULT_STORED_HEADERS", "IdempotencyMiddleware"]


class IdempotencyMiddleware:
    """Runs a request that carries an Idempotency-Key at most once per key and scope, and answers every retry
    with the first answer.

    `pool` is a psycopg 3 `AsyncConnectionPool`; autocommit connections (`kwargs={"autocommit": True}`) save a
    BEGIN/COMMIT per call, and any other pool works too. `scope(asgi_scope)`, sync or async, names whose keys
    these are (a tenant, from authentication; never a header the client sets); None means it cannot tell.
    Durations (`lease`, `wait`, `retention`) are seconds (an int or a float) or a `timedelta`; None takes the
    server's setting (`wait`: no waiting).

    `transactional` (True, or `transactional(asgi_scope) -> bool` to pick routes) runs the claim, the handler and
    the finish in one transaction on one connection of the pool, committed once after the handler answered: the
    handler runs its SQL on `request.state.idempotency.connection`, and its writes commit with the stored answer,
    or not at all. It must not COMMIT or ROLLBACK that transaction itself (savepoints are fine).

    Every option is checked here: a bad one raises TypeError or ValueError naming it.
    """

    def __init__(self, app: ASGIApp, *, pool: AsyncConnectionPool[Any], scope: ScopeFunction,
                 lease: Duration | None = None, wait: Duration | None = None, retention: Duration | None = None,
                 methods: Iterable[str] = ("POST", "PATCH"), required: bool = True,
                 retryable_statuses: Iterable[int] = (429, 503),
                 stored_headers: Iterable[str] = DEFAULT_STORED_HEADERS, outcome_header: str | None = None,
                 logger: logging.Logger | logging.LoggerAdapter[Any] | None = None,
                 max_body_bytes: int = 1 << 20, transactional: Transactional = False) -> None:
        self.app = app
        self._options = options.read(pool=pool, scope=scope, lease=lease, wait=wait, retention=retention,
                                     methods=methods, required=required, retryable_statuses=retryable_statuses,
                                     stored_headers=stored_headers, outcome_header=outcome_header, logger=logger,
                                     max_body_bytes=max_body_bytes, transactional=transactional)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await flow.handle(self._options, self.app, scope, receive, send)
