"""The middleware's options (docs/integrations.md, "Options"), each checked when the middleware is made: a bad one
raises TypeError or ValueError naming it, at start-up rather than at the first request."""
from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from idem_keys_core import options as check
from idem_keys_core.answers import DEFAULT_STORED_HEADERS
from idem_keys_core.options import Log

from .asgi import Scope

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

ScopeFunction: TypeAlias = Callable[[Scope], "str | None | Awaitable[str | None]"]
Transactional: TypeAlias = bool | Callable[[Scope], bool]
Duration: TypeAlias = timedelta | float  # seconds (an int is a float here)

__all__ = ["DEFAULT_STORED_HEADERS", "Duration", "Options", "ScopeFunction", "Transactional", "read"]


@dataclass(frozen=True)
class Options:
    """The options, checked, in the form the request flow uses."""

    pool: AsyncConnectionPool[Any]
    scope: ScopeFunction
    lease: float | None  # seconds, or None for the server's idem_keys.lease
    wait: float | None  # None: no waiting
    retention: float | None
    methods: frozenset[str]
    required: bool
    retryable_statuses: frozenset[int]
    stored_headers: Mapping[str, str]  # lower-case name -> the name as configured
    outcome_header: bytes | None  # lower-case, as ASGI headers are
    max_body_bytes: int
    transactional: Transactional
    log: Log

    def is_transactional(self, scope: Scope) -> bool:
        if isinstance(self.transactional, bool):
            return self.transactional
        return bool(self.transactional(scope))


def read(*, pool: Any, scope: Any, lease: Any, wait: Any, retention: Any, methods: Any, required: Any,
         retryable_statuses: Any, stored_headers: Any, outcome_header: Any, logger: Any, max_body_bytes: Any,
         transactional: Any) -> Options:
    # No default scope: one shared by every tenant would let one tenant's key answer another's request.
    if not callable(scope):
        raise TypeError("IdempotencyMiddleware needs scope=, a function of the ASGI scope giving its tenant")
    if pool is None:
        raise TypeError("IdempotencyMiddleware needs pool=, a psycopg_pool.AsyncConnectionPool")
    if not isinstance(transactional, bool) and not callable(transactional):
        raise TypeError(f"transactional: True, False or a function of the ASGI scope, not {transactional!r}")
    # The mode takes a connection out of the pool for the whole request: a sync pool, or anything else without the
    # async getconn/putconn pair, would fail at the first request, so it fails here instead.
    if transactional is not False and not all(inspect.iscoroutinefunction(getattr(pool, name, None))
                                              for name in ("getconn", "putconn")):
        raise TypeError("transactional: pool= must be a psycopg_pool.AsyncConnectionPool (async getconn and "
                        f"putconn), not {type(pool).__name__}")
    header = check.header_name("outcome_header", outcome_header)
    return Options(
        pool=pool, scope=scope,
        lease=check.seconds("lease", lease),
        wait=check.seconds("wait", wait, allow_zero=True) or None,  # 0 and None both mean "do not wait"
        retention=check.seconds("retention", retention),
        methods=check.methods("methods", methods),
        required=check.flag("required", required),
        retryable_statuses=check.statuses("retryable_statuses", retryable_statuses),
        stored_headers=check.stored_headers("stored_headers", stored_headers),
        outcome_header=header.lower().encode("latin-1") if header else None,
        # The body is held whole in memory for the fingerprint, before any limit of the app's applies.
        max_body_bytes=check.max_body_bytes("max_body_bytes", max_body_bytes),
        transactional=transactional,
        log=check.logger("logger", logger, "idem_keys_asgi"),
    )
