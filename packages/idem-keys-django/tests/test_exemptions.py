"""Views their author took out of ATOMIC_REQUESTS (transaction.non_atomic_requests for the alias) run outside the
package's transaction too, in the default mode, behind the middleware, the decorator and the mixin alike: a DRF
view's exception answers are stored as answers, and an atomic(durable=True) block commits on its own. A view that
opens a durable block inside the request's transaction fails, as Django makes it, with a log saying what to do;
asking for transactional=True on a non-atomic view is refused at start-up."""
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.http import HttpResponse
from django.urls import URLResolver
from rest_framework.exceptions import ValidationError
from rest_framework.views import APIView

from conftest import client, fresh_key, post, stored, writes
from project.views import ExemptPayments, non_atomic
from test_middleware import use
from test_transactional import mode, write  # noqa: F401 (mode: a fixture)
from idem_keys_django.views import IdempotentMixin, idempotent


def durable_write(seen):
    """Writes in a durable block, noting what another connection sees inside it and after it."""
    def answer(request, attempt):
        with transaction.atomic(using=attempt.using, durable=True):
            write(request, attempt)
            seen.append(writes(attempt.scope))
        seen.append(writes(attempt.scope))
        return HttpResponse(b"paid", status=201)
    return answer


def refusing(request, attempt):
    write(request, attempt)
    raise ValidationError({"amount": ["too small"]})


def test_a_non_atomic_drf_view_behind_the_middleware_stores_its_exception_answers(mode, handler, tenant):
    """DRF answers an exception by rolling back the innermost atomic block of every ATOMIC_REQUESTS alias; with
    the view outside the package's transaction there is none, so the answer is stored like any other."""
    handler.answer = refusing
    c, key = client(), fresh_key()
    first = post(c, tenant, key, path="/pay-exempt-drf", HTTP_X_DRF_TENANT=tenant)
    again = post(c, tenant, key, path="/pay-exempt-drf", HTTP_X_DRF_TENANT=tenant)
    assert first.status_code == 400 and first.json() == {"amount": ["too small"]}
    assert first["Idempotency-Outcome"] == "claimed" and not handler.attempts[0].transactional
    assert again.status_code == 400 and again.content == first.content and again["Idempotent-Replayed"] == "true"
    assert handler.runs == 1 and writes(tenant) == [(key, "claimed")]  # as without the package: not rolled back


def test_a_non_atomic_view_behind_the_middleware_commits_its_durable_block(mode, handler, tenant):
    seen = []
    handler.answer = durable_write(seen)
    c, key = client(), fresh_key()
    first = post(c, tenant, key, path="/pay-exempt")
    again = post(c, tenant, key, path="/pay-exempt")
    assert first.status_code == 201 and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    assert seen == [[], [(key, "claimed")]]  # committed when its block ended, before the answer was stored


def test_a_durable_block_inside_the_transaction_fails_and_says_what_to_do(mode, handler, tenant, caplog):
    seen = []
    handler.answer = durable_write(seen)
    key = fresh_key()
    reply = post(client(), tenant, key)  # /pay: not marked, so in the request's transaction
    assert reply.status_code == 500 and reply["Idempotency-Outcome"] == "claimed"
    assert "mark it transaction.non_atomic_requests(using=" in caplog.text
    assert stored(tenant, key) is None and writes(tenant) == []  # rolled back: the key is free


def test_the_decorator_on_a_non_atomic_view(handler, tenant, tables):
    """On the alias with ATOMIC_REQUESTS, which would make it transactional: the default mode, no view block."""
    seen = []
    handler.answer = durable_write(seen)
    c, key = client(), fresh_key()
    assert post(c, tenant, key, path="/decorated-exempt").status_code == 201
    assert post(c, tenant, key, path="/decorated-exempt")["Idempotent-Replayed"] == "true"
    assert seen == [[], [(key, "claimed")]] and handler.runs == 1


def test_the_mixin_on_a_non_atomic_view(handler, tenant, tables):
    handler.answer = refusing
    c, key = client(), fresh_key()
    first = post(c, tenant, key, path="/drf-exempt", drf=True)
    again = post(c, tenant, key, path="/drf-exempt", drf=True)
    assert first.status_code == 400 and not handler.attempts[0].transactional
    assert again.content == first.content and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    assert writes(tenant) == [(key, "claimed")]
    assert ExemptPayments.idempotency_guard().options.transactional is False


def test_transactional_on_a_non_atomic_view_is_refused_at_start_up():
    def view(request):
        return HttpResponse()
    with pytest.raises(ImproperlyConfigured, match="non_atomic_requests for 'atomic' and asks for transactional"):
        idempotent(database="atomic", transactional=True)(non_atomic(view))

    class Contradiction(IdempotentMixin, APIView):
        idempotency_options = {"scope": "project.auth.drf_tenant_of", "transactional": True}

        @non_atomic
        def dispatch(self, *args, **kwargs):
            return super().dispatch(*args, **kwargs)
    with pytest.raises(ImproperlyConfigured, match="Contradiction is marked transaction.non_atomic_requests"):
        Contradiction.as_view()


def test_a_view_not_marked_stays_in_the_transaction(settings, handler, tenant, tables):
    """The middleware reads the marks of the view the URL resolves to, not of every view."""
    use(settings, TRANSACTIONAL=True)
    handler.answer = lambda request, attempt: HttpResponse(str(attempt.transactional).encode(), status=201)
    c = client()
    assert post(c, tenant, fresh_key()).content == b"True"
    assert post(c, tenant, fresh_key(), path="/pay-exempt").content == b"False"


def test_the_requests_own_urlconf_is_the_one_resolved(settings, handler, tenant, tables):
    """A middleware before this one set request.urlconf: the view Django will run is resolved there, so its mark
    counts, not that of the view of the same path in ROOT_URLCONF."""
    use(settings, TRANSACTIONAL=True)
    settings.MIDDLEWARE = ["project.auth.Authenticate", "project.exempt_urls.UseExemptUrls",
                           "idem_keys_django.middleware.IdempotencyMiddleware"]
    handler.answer = lambda request, attempt: HttpResponse(str(attempt.transactional).encode(), status=201)
    c = client()
    assert post(c, tenant, fresh_key()).content == b"True"
    assert post(c, tenant, fresh_key(), HTTP_X_EXEMPT_URLS="1").content == b"False"


def test_the_url_is_resolved_only_for_a_key_to_claim(settings, handler, tenant, tables, monkeypatch):
    """Reading a view's mark costs a resolution of the URL, on top of Django's own: only for a request whose key
    is about to be claimed, never for a method the middleware does not cover, nor a request it refuses first."""
    use(settings, TRANSACTIONAL=True)
    resolved = []
    resolve = URLResolver.resolve

    def counted(self, path):
        resolved.append(path)
        return resolve(self, path)
    monkeypatch.setattr(URLResolver, "resolve", counted)
    c = client()

    def resolutions(reply, status):
        assert reply.status_code == status, reply.content
        count = len(resolved)
        resolved.clear()
        return count
    # Django's own resolution: one for a request that reaches the view, none for one the middleware answers.
    assert resolutions(c.get("/pay", HTTP_X_TENANT=tenant), 201) == 1
    assert resolutions(post(c, tenant, None), 400) == 0
    assert resolutions(post(c, tenant, "a,b"), 400) == 0
    assert resolutions(post(c, None, fresh_key()), 500) == 0  # no scope
    assert resolutions(post(c, tenant, fresh_key()), 201) == 2  # the middleware's, then Django's
