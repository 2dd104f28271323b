"""Idempotency per view: the `idempotent` decorator for function views, and `IdempotentMixin` for Django REST
framework's class-based views (APIView, the generic views, ViewSets), which claims after DRF has authenticated
the request, so the scope function can read DRF's `request.user`.

Both take the view out of Django's ATOMIC_REQUESTS for their database alias (non_atomic_requests) and apply it
themselves, where it can be done right: in transactional mode the request's transaction is theirs, with the view
in a savepoint of it when ATOMIC_REQUESTS is on (so a DRF exception answer still rolls the view's work back, and
the answer is stored); in the default mode the view's atomic block commits between the claim and the answer.
A view its author marked `transaction.non_atomic_requests` for the alias runs in the default mode, without
either block (exemption.py); asking for `transactional=True` on such a view is refused when it is decorated
(the mixin: in `as_view()`)."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Mapping
from inspect import iscoroutinefunction
from typing import Any, ClassVar, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.http import HttpRequest
from django.http.response import HttpResponseBase

from . import conf
from .attempt import Attempt
from .exemption import non_atomic_requests_of, take_out_of_atomic_requests
from .guard import Guard

View = TypeVar("View", bound=Callable[..., Any])


def idempotent(view: View | None = None, /, **options: Any) -> Any:
    """Makes a function view idempotent: `@idempotent`, or `@idempotent(lease="1 min", transactional=True)` with
    any IDEM_KEYS key (in any case) over the setting. Checked when the view is decorated.

    Put it outermost, above `@api_view` or `@csrf_exempt`: it then gets Django's request, whose `user` is the one
    Django's AuthenticationMiddleware set. For DRF's own authentication (tokens), use IdempotentMixin. A request
    the middleware has claimed already is passed through. Async views: use the middleware."""
    def decorate(view: View) -> View:
        if iscoroutinefunction(view):
            raise ImproperlyConfigured(f"idempotent: {view.__qualname__} is an async view; use "
                                       "IdempotencyMiddleware for those")
        guard = _guard_for(view.__qualname__, options, non_atomic_requests_of(view))

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            started = None if _claimed(request) else guard.begin(request)
            if not isinstance(started, Attempt):
                if started is not None:
                    return started
                with guard.view_atomic():
                    response: HttpResponseBase = view(request, *args, **kwargs)
                return response
            request.idempotency = started  # type: ignore[attr-defined]
            try:
                with guard.view_atomic():
                    response = _rendered(view(request, *args, **kwargs))
            except BaseException as e:
                guard.abort(started, e)
                raise
            return guard.finish(started, response)

        take_out_of_atomic_requests(wrapper, guard.alias)
        return wrapper  # type: ignore[return-value]

    return decorate(view) if view is not None else decorate


class _Answered(Exception):
    """Raised from initial() when the claim answers the request itself (a problem, a replay)."""

    def __init__(self, response: HttpResponseBase) -> None:
        super().__init__()
        self.response = response


class _Run:
    """One request through an IdempotentMixin view."""

    def __init__(self) -> None:
        self.attempt: Attempt | None = None
        self.view_atomic: contextlib.AbstractContextManager[Any] | None = None
        self.settled = False

    def enter_view(self, guard: _ViewGuard) -> None:
        self.view_atomic = guard.view_atomic()
        self.view_atomic.__enter__()

    def leave_view(self, error: BaseException | None) -> None:
        atomic, self.view_atomic = self.view_atomic, None
        if atomic is not None:
            atomic.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)


class IdempotentMixin:
    """For DRF's class-based views, first among the bases: `class Payments(IdempotentMixin, APIView)`. The key is
    claimed in `initial()`, after DRF's authentication, permission and throttle checks, and settled in
    `finalize_response()`, with the rendered answer; an exception DRF answers (ValidationError, NotFound, ...) is
    an answer like any other. `idempotency_options` takes any IDEM_KEYS key over the setting, checked in
    `as_view()` (when the URLconf is loaded)."""

    idempotency_options: ClassVar[Mapping[str, Any]] = {}
    _idempotency: _Run

    @classmethod
    def idempotency_guard(cls) -> _ViewGuard:
        """The class' own configuration, made once (a subclass makes its own, with its own options). The
        author's non_atomic_requests marks are on dispatch (`method_decorator(..., name="dispatch")`)."""
        guard = cls.__dict__.get("_idempotency_guard")
        if not isinstance(guard, _ViewGuard):
            dispatch = getattr(cls, "dispatch", None)
            guard = _guard_for(cls.__qualname__, cls.idempotency_options, non_atomic_requests_of(dispatch))
            cls._idempotency_guard = guard  # type: ignore[attr-defined]
        return guard

    @classmethod
    def as_view(cls, *args: Any, **initkwargs: Any) -> Any:
        guard = cls.idempotency_guard()
        view = super().as_view(*args, **initkwargs)  # type: ignore[misc]
        take_out_of_atomic_requests(view, guard.alias)
        return view

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        guard = self.idempotency_guard()
        run = self._idempotency = _Run()
        if _claimed(request) or not guard.covers(request):
            # Not this view's to claim: ATOMIC_REQUESTS as Django would have applied it.
            with guard.view_atomic():
                response: HttpResponseBase = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
            return response
        try:
            response = super().dispatch(request, *args, **kwargs)  # type: ignore[misc]
        except BaseException as e:
            run.leave_view(e)
            if run.attempt is not None and not run.settled:
                run.settled = True
                guard.abort(run.attempt, e)
            raise
        return response

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        run, guard = self._idempotency, self.idempotency_guard()
        django_request: HttpRequest = request._request
        if guard.covers(django_request) and not _claimed(django_request):
            # Read the body before DRF's authentication may parse it from the stream (SessionAuthentication's
            # CSRF check reads request.POST), so that it stays readable for the fingerprint.
            with contextlib.suppress(Exception):
                if int(django_request.META.get("CONTENT_LENGTH") or 0) <= guard.options.max_body_bytes:
                    django_request.body  # noqa: B018  (cached on the request)
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        started = guard.begin(django_request, scope_request=request)
        if started is not None and not isinstance(started, Attempt):
            raise _Answered(started)
        if started is not None:
            run.attempt = django_request.idempotency = started  # type: ignore[attr-defined]
        run.enter_view(guard)

    def handle_exception(self, exc: Exception) -> HttpResponseBase:
        if isinstance(exc, _Answered):
            self._idempotency.settled = True
            return exc.response
        response: HttpResponseBase = super().handle_exception(exc)  # type: ignore[misc]
        return response

    def finalize_response(self, request: Any, response: HttpResponseBase, *args: Any,
                          **kwargs: Any) -> HttpResponseBase:
        response = super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]
        run = self._idempotency
        run.leave_view(None)
        if run.attempt is None or run.settled:
            return response
        response = _rendered(response)
        run.settled = True
        return self.idempotency_guard().finish(run.attempt, response)


def _claimed(request: HttpRequest) -> bool:
    """Claimed already, by the middleware (or an outer decorator)."""
    return isinstance(getattr(request, "idempotency", None), Attempt)


class _ViewGuard(Guard):
    """A view's Guard, which also knows whether the view's author took it out of ATOMIC_REQUESTS."""

    def __init__(self, options: conf.Options, non_atomic: bool) -> None:
        super().__init__(options)
        self.non_atomic = non_atomic

    def view_atomic(self) -> contextlib.AbstractContextManager[Any]:
        """The view's own atomic block, as ATOMIC_REQUESTS would have wrapped it: the request's transaction in
        the default mode, a savepoint of the package's in transactional mode; none for a non-atomic view."""
        if not self.non_atomic and connections.settings[self.alias].get("ATOMIC_REQUESTS"):
            return transaction.atomic(using=self.alias)
        return contextlib.nullcontext()


def _guard_for(name: str, overrides: Mapping[str, Any], non_atomic_requests: frozenset[str]) -> _ViewGuard:
    """The view's options; a view its author marked non_atomic_requests for the alias runs in the default mode,
    and asking for transactional mode on it as well is a contradiction, refused at start-up."""
    options = conf.load(overrides)
    if options.database not in non_atomic_requests:
        return _ViewGuard(options, non_atomic=False)
    if any(k.upper() == "TRANSACTIONAL" and v is True for k, v in overrides.items()):
        raise ImproperlyConfigured(f"idempotent: {name} is marked transaction.non_atomic_requests for "
                                   f"{options.database!r} and asks for transactional=True: a view outside the "
                                   "request's transaction cannot run its work in the key's; drop one of the two")
    return _ViewGuard(dataclasses.replace(options, transactional=False), non_atomic=True)


def _rendered(response: HttpResponseBase) -> HttpResponseBase:
    """A TemplateResponse or DRF Response rendered now (Django would render it after the view): its bytes are
    what is stored."""
    render = getattr(response, "render", None)
    if callable(render) and not getattr(response, "is_rendered", True):
        rendered: HttpResponseBase = render()
        return rendered
    return response
