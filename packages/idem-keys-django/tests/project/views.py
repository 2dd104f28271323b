"""The views under test: each runs `handler`, which a test sets (tests/conftest.py), so one URLconf serves every
test. The decorated and DRF views claim their keys themselves (the middleware's PATHS leave them alone)."""
from django.db import transaction
from django.http import HttpResponse
from rest_framework.response import Response
from rest_framework.views import APIView

from idem_keys_django.views import IdempotentMixin, idempotent


class Handler:
    """An answer chosen by the test; counts its runs and keeps what it saw."""

    def __init__(self, answer=None):
        self.answer = answer or (lambda request, attempt: default_answer())
        self.attempts = []
        self.bodies = []

    def __call__(self, request):
        attempt = getattr(request, "idempotency", None)
        self.attempts.append(attempt)
        self.bodies.append(request.body)
        return self.answer(request, attempt)

    @property
    def runs(self):
        return len(self.attempts)


def default_answer():
    return HttpResponse(b'{"b": 1,  "a": 2}', status=201, content_type="application/json",
                        headers={"Location": "/pay/1", "X-Request-Id": "r1"})


handler = Handler()


def endpoint(request, rest=""):
    return handler(request)


@transaction.non_atomic_requests(using="atomic")  # Django refuses ATOMIC_REQUESTS for async views
async def async_endpoint(request):
    from asgiref.sync import sync_to_async
    return await sync_to_async(handler)(request)


def non_atomic(view):
    """transaction.non_atomic_requests for both aliases the tests' middleware uses ("default" with TRANSACTIONAL,
    "atomic" with ATOMIC_REQUESTS)."""
    for alias in ("default", "atomic"):
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


@non_atomic
def exempt_endpoint(request):
    return handler(request)


class ExemptAPIView(APIView):
    """A plain DRF view (no mixin) behind the middleware, taken out of ATOMIC_REQUESTS by its author."""

    @non_atomic
    def dispatch(self, *args, **kwargs):
        return super().dispatch(*args, **kwargs)

    def post(self, request):
        return handler(request)


decorated = idempotent(endpoint)
decorated_tx = idempotent(transactional=True)(endpoint)
decorated_atomic = idempotent(database="atomic")(endpoint)
decorated_atomic_default = idempotent(database="atomic", transactional=False)(endpoint)
decorated_exempt = idempotent(database="atomic")(exempt_endpoint)


class Payments(IdempotentMixin, APIView):
    """A DRF view; its scope is DRF's authenticated user."""

    idempotency_options = {"scope": "project.auth.drf_tenant_of"}

    def post(self, request):
        return handler(request)


class TransactionalPayments(Payments):
    idempotency_options = {"scope": "project.auth.drf_tenant_of", "transactional": True}


class AtomicPayments(Payments):
    """On the alias with ATOMIC_REQUESTS: transactional by default."""
    idempotency_options = {"scope": "project.auth.drf_tenant_of", "database": "atomic"}


class AtomicDefaultPayments(Payments):
    """On the alias with ATOMIC_REQUESTS, in the default mode: the view's atomic block commits between."""
    idempotency_options = {"scope": "project.auth.drf_tenant_of", "database": "atomic", "transactional": False}


class ExemptPayments(Payments):
    """The mixin on the alias with ATOMIC_REQUESTS, on a view its author took out of it: the default mode."""
    idempotency_options = {"scope": "project.auth.drf_tenant_of", "database": "atomic"}

    @non_atomic
    def dispatch(self, *args, **kwargs):
        return super().dispatch(*args, **kwargs)


def drf_answer(data, status=201, headers=None):
    return Response(data, status=status, headers=headers)
