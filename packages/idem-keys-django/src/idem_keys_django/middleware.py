"""IdempotencyMiddleware: a new-style Django middleware around the rest of the chain and the view, so it holds
the view's answer until the key is settled. Configured by settings.IDEM_KEYS (conf.py)."""
from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import Resolver404, get_resolver

from . import conf
from .attempt import Attempt
from .exemption import non_atomic_requests_of
from .guard import Guard


class IdempotencyMiddleware:
    """Runs a request that carries an Idempotency-Key at most once per key and scope, and answers every retry
    with the first answer. Put it after the middleware that authenticates (the scope function reads its work)
    and before any that reads `request.POST` or the body.

    In transactional mode (IDEM_KEYS["TRANSACTIONAL"], or the database's ATOMIC_REQUESTS) it opens the request's
    transaction itself, around the claim, the rest of the chain, the view and the stored answer, and commits it
    before the answer leaves, so a failed COMMIT can still be answered `503 commit-failed`. With ATOMIC_REQUESTS,
    Django's own atomic block around the view runs inside it, as a savepoint. A view marked
    `transaction.non_atomic_requests` for the alias runs in the default mode instead (exemption.py).

    Sync only: Django runs it in a thread under an ASGI server, and calls an async view from it with
    async_to_sync, whose database calls (the async ORM) come back to this thread, and so to its connection."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        options = conf.load()  # ImproperlyConfigured here is at start-up: Django makes the chain once
        self._guard = Guard(options)
        self._paths = options.paths

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if self._paths is not None and not any(p.match(request.path_info) for p in self._paths):
            return self.get_response(request)
        started = self._guard.begin(request, transactional=lambda: self._transactional_for(request))
        if started is None:
            return self.get_response(request)
        if not isinstance(started, Attempt):
            return started
        request.idempotency = started  # type: ignore[attr-defined]
        try:
            response = self.get_response(request)
        except BaseException as e:
            # Django answers a view's exception itself, inside this middleware (see Guard.finish); one gets here
            # with DEBUG_PROPAGATE_EXCEPTIONS, or from a middleware that lets one through.
            self._guard.abort(started, e)
            raise
        return self._guard.finish(started, response)

    def _transactional_for(self, request: HttpRequest) -> bool:
        """The mode, unless the view the request goes to was taken out of ATOMIC_REQUESTS for the alias by its
        author: Django resolves the URL only after the middleware chain has begun, so it is resolved here too, as
        Django will (with the request's own urlconf, when a middleware before this one set it), and only for a
        request whose key is about to be claimed."""
        if not self._guard.options.transactional:
            return False
        try:
            match = get_resolver(getattr(request, "urlconf", None)).resolve(request.path_info)
        except Resolver404:
            return True  # Django's 404, in the transaction like any answer
        return self._guard.alias not in non_atomic_requests_of(match.func)
