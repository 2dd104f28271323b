"""The per-view ways in: the `idempotent` decorator on a function view, and IdempotentMixin on Django REST
framework's APIView, whose scope function reads DRF's authenticated user. Both modes, with and without
ATOMIC_REQUESTS (project/urls.py names a view for each)."""
import pytest
from django.db import connections
from django.http import HttpResponse
from rest_framework.exceptions import NotFound, ValidationError

from conftest import BODY, client, expect_problem, fresh_key, post, stored, writes
from project import urls
from test_middleware import use
from test_transactional import write, writing


def view_of(path):
    return next(p.callback for p in urls.urlpatterns if str(p.pattern) == path)


# ---- the decorator ---------------------------------------------------------------------------------------------

def test_decorated_view_claims_and_replays(handler, tenant):
    c, key = client(), fresh_key()
    first = post(c, tenant, key, path="/decorated")
    again = post(c, tenant, key, path="/decorated")
    assert first.status_code == 201 and first["Idempotency-Outcome"] == "claimed"
    assert again.content == first.content and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    expect_problem(post(c, tenant, None, path="/decorated"), 400, "key-missing")
    expect_problem(post(c, tenant, key, b'{"other": 1}', path="/decorated"), 422, "key-reused")
    got = c.get("/decorated", HTTP_X_TENANT=tenant)
    assert got.status_code == 201 and handler.attempts[-1] is None  # a GET passes untouched


def test_decorated_view_exception_releases(handler, tenant):
    def boom(request, attempt):
        raise RuntimeError("boom")
    handler.answer = boom
    c, key = client(), fresh_key()
    assert post(c, tenant, key, path="/decorated").status_code == 500
    handler.answer = lambda request, attempt: HttpResponse(b"ok", status=201)
    assert post(c, tenant, key, path="/decorated")["Idempotency-Outcome"] == "claimed"


def test_decorated_transactional(handler, tenant, tables):
    handler.answer = writing()
    c, key = client(), fresh_key()
    assert post(c, tenant, key, path="/decorated-tx").status_code == 201
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, key) == "replay"

    def boom(request, attempt):
        raise RuntimeError("boom after the write")
    handler.answer = writing(boom)
    other = fresh_key()
    assert post(c, tenant, other, path="/decorated-tx").status_code == 500
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, other) is None


def test_decorated_commit_failed(handler, tenant, tables):
    def twice(request, attempt):
        with connections[attempt.using].cursor() as cursor:
            cursor.execute("INSERT INTO django_tx_guard VALUES (%s, 1), (%s, 1)", (tenant, tenant))
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(twice)
    key = fresh_key()
    expect_problem(post(client(), tenant, key, path="/decorated-tx"), 503, "commit-failed")
    assert writes(tenant) == [] and stored(tenant, key) is None


def test_decorated_views_leave_atomic_requests(handler, tenant, tables):
    """Django's ATOMIC_REQUESTS block is the decorator's to apply: the view is taken out of Django's, and on the
    alias with it the decorator is transactional (None follows ATOMIC_REQUESTS), with the view in a savepoint."""
    assert "atomic" in view_of("decorated-atomic")._non_atomic_requests

    def refuses(request, attempt):
        assert attempt.transactional and connections["atomic"].savepoint_ids  # the view's own block
        write(request, attempt)
        from django.db import transaction
        transaction.set_rollback(True, using="atomic")  # what DRF does for an exception answer
        return HttpResponse(b"invalid", status=400)
    handler.answer = refuses
    c, key = client(), fresh_key()
    assert post(c, tenant, key, path="/decorated-atomic").status_code == 400
    assert post(c, tenant, key, path="/decorated-atomic")["Idempotent-Replayed"] == "true"
    assert writes(tenant) == [] and handler.runs == 1


def test_decorated_default_mode_under_atomic_requests(handler, tenant, tables):
    """TRANSACTIONAL False on an alias with ATOMIC_REQUESTS: the claim commits first, the view's own atomic block
    commits its work, then the answer: three commits, as by default."""
    seen = []

    def look(request, attempt):
        assert not attempt.transactional and connections["atomic"].in_atomic_block
        write(request, attempt)
        seen.append((stored(tenant, attempt.key), writes(tenant)))  # the claim is committed, the write not yet
        return HttpResponse(b"paid", status=201)
    handler.answer = look
    key = fresh_key()
    assert post(client(), tenant, key, path="/decorated-atomic-default").status_code == 201
    assert seen == [("in_progress", [])]
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, key) == "replay"


def test_a_request_the_middleware_claimed_passes_the_decorator(settings, handler, tenant):
    use(settings, PATHS=[r"^/decorated$"])
    c, key = client(), fresh_key()
    post(c, tenant, key, path="/decorated")
    assert post(c, tenant, key, path="/decorated")["Idempotent-Replayed"] == "true"
    # One claim, the middleware's: the decorator did not claim the same key again inside it.
    assert handler.runs == 1 and handler.attempts[0].outcome == "claimed"


# ---- Django REST framework -------------------------------------------------------------------------------------

def drf(c, tenant, key, body=BODY, path="/drf", **extra):
    return post(c, tenant, key, body, path=path, drf=True, **extra)


def test_drf_scope_is_the_authenticated_user(handler, tenant):
    """The scope function runs after DRF's authentication: it reads request.user."""
    handler.answer = lambda request, attempt: HttpResponse(attempt.scope.encode(), status=201)
    c, key = client(), fresh_key()
    first = drf(c, tenant, key)
    again = drf(c, tenant, key)
    assert first.content == tenant.encode() and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    refused = post(c, tenant, key, path="/drf")  # X-Tenant only: DRF does not authenticate it
    assert refused.status_code == 401 and "Idempotency-Outcome" not in refused and handler.runs == 1


def test_drf_response_is_rendered_and_stored(handler, tenant):
    from project.views import drf_answer
    handler.answer = lambda request, attempt: drf_answer({"id": 7, "attempt": attempt.outcome},
                                                         headers={"Location": "/drf/7"})
    c, key = client(), fresh_key()
    first = drf(c, tenant, key)
    again = drf(c, tenant, key)
    assert first.status_code == 201 and first.json() == {"id": 7, "attempt": "claimed"}
    assert again.content == first.content and again["Location"] == "/drf/7"
    assert again["Content-Type"] == "application/json" and again["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize("error,status", [(ValidationError({"amount": ["too small"]}), 400), (NotFound(), 404)])
def test_drf_exception_answers_are_stored(handler, tenant, error, status):
    def refuses(request, attempt):
        raise error
    handler.answer = refuses
    c, key = client(), fresh_key()
    first = drf(c, tenant, key)
    again = drf(c, tenant, key)
    assert first.status_code == again.status_code == status and again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and handler.runs == 1


def test_drf_uncaught_exception_releases(handler, tenant):
    def boom(request, attempt):
        raise RuntimeError("boom")
    handler.answer = boom
    c, key = client(), fresh_key()
    assert drf(c, tenant, key).status_code == 500
    assert drf(c, tenant, key).status_code == 500 and handler.runs == 2  # released: it ran again


def test_drf_duplicates_and_problems(handler, tenant):
    c, key = client(), fresh_key()
    expect_problem(drf(c, tenant, None), 400, "key-missing")
    expect_problem(drf(c, tenant, "two words"), 400, "key-malformed")
    drf(c, tenant, key)
    expect_problem(drf(c, tenant, key, b'{"amount": 1}'), 422, "key-reused")
    assert handler.runs == 1


def test_drf_leave_unsettled(handler, tenant):
    def unsure(request, attempt):
        request.idempotency.leave_unsettled()  # DRF's Request hands the attribute on
        return HttpResponse(b"maybe", status=502)
    handler.answer = unsure
    c, key = client(), fresh_key()
    assert drf(c, tenant, key).status_code == 502
    expect_problem(drf(c, tenant, key), 409, "request-in-progress")


def test_drf_transactional(handler, tenant, tables):
    handler.answer = writing()
    c, key = client(), fresh_key()
    assert drf(c, tenant, key, path="/drf-tx").status_code == 201
    assert writes(tenant) == [(key, "claimed")]

    def boom(request, attempt):
        raise RuntimeError("boom after the write")
    handler.answer = writing(boom)
    other = fresh_key()
    assert drf(c, tenant, other, path="/drf-tx").status_code == 500
    assert writes(tenant) == [(key, "claimed")] and stored(tenant, other) is None

    def twice(request, attempt):
        with connections[attempt.using].cursor() as cursor:
            cursor.execute("INSERT INTO django_tx_guard VALUES (%s, 1), (%s, 1)", (tenant, tenant))
        return HttpResponse(b"paid", status=201)
    handler.answer = writing(twice)
    third = fresh_key()
    expect_problem(drf(c, tenant, third, path="/drf-tx"), 503, "commit-failed")
    assert stored(tenant, third) is None


@pytest.mark.parametrize("path,transactional", [("/drf-atomic", True), ("/drf-atomic-default", False)])
def test_drf_exception_answer_rolls_back_the_view_and_is_stored(handler, tenant, tables, path, transactional):
    """With ATOMIC_REQUESTS DRF rolls the view's work back when it answers an exception (set_rollback); the
    answer is stored all the same, in either mode."""
    def refuses(request, attempt):
        assert attempt.transactional is transactional
        write(request, attempt)
        raise ValidationError({"amount": ["too small"]})
    handler.answer = refuses
    c, key = client(), fresh_key()
    assert drf(c, tenant, key, path=path).status_code == 400
    again = drf(c, tenant, key, path=path)
    assert again.status_code == 400 and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    assert writes(tenant) == []
    handler.answer = writing(transactional=transactional)
    other = fresh_key()
    assert drf(c, tenant, other, path=path).status_code == 201
    assert writes(tenant) == [(other, "claimed")]


def test_drf_get_passes_with_atomic_requests(handler, tenant):
    """A request the mixin does not claim still gets Django's ATOMIC_REQUESTS block, from the mixin."""
    seen = []

    def get(self, request):
        seen.append(connections["atomic"].in_atomic_block)
        return HttpResponse(b"ok")
    from project.views import AtomicPayments
    AtomicPayments.get = get
    try:
        reply = client().get("/drf-atomic", HTTP_X_DRF_TENANT=tenant)
    finally:
        del AtomicPayments.get
    assert reply.status_code == 200 and seen == [True]


def test_the_views_are_out_of_djangos_atomic_requests_for_their_alias():
    aliases = {"drf": "default", "drf-tx": "default", "drf-atomic": "atomic", "drf-atomic-default": "atomic",
               "decorated": "default", "decorated-tx": "default", "decorated-atomic": "atomic"}
    for path, alias in aliases.items():
        assert view_of(path)._non_atomic_requests == {alias}, path
