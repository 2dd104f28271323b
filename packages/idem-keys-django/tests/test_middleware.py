"""IdempotencyMiddleware in the default mode (each SQL call commits on its own), through Django's whole handler,
against a real idem_keys database ($DATABASE_URL): every row of the behaviour tables in docs/integrations.md."""
import json
import threading
import time

import pytest
from django.db import connections
from django.http import FileResponse, HttpResponse, StreamingHttpResponse

from conftest import BODY, client, expect_problem, fresh_key, in_thread, outside, post


def use(settings, **options):
    """IDEM_KEYS with these keys over the test project's; the middleware reads it when a client's handler is made."""
    settings.IDEM_KEYS = {**settings.IDEM_KEYS, **options}


def started(handler, timeout=5.0):
    """Waits, bounded, until the handler has begun its first run."""
    end = time.monotonic() + timeout
    while handler.runs == 0:
        assert time.monotonic() < end, "the handler did not start"
        time.sleep(0.01)


# ---- claim and replay ------------------------------------------------------------------------------------------

def test_claim_then_replay_byte_for_byte(handler, tenant):
    c, key = client(), fresh_key()
    first = post(c, tenant, key)
    again = post(c, tenant, key)
    assert first.status_code == 201 and first.content == b'{"b": 1,  "a": 2}'
    assert first["Idempotency-Outcome"] == "claimed" and "Idempotent-Replayed" not in first
    assert again.status_code == 201 and again.content == first.content
    assert again["Idempotent-Replayed"] == "true" and again["Idempotency-Outcome"] == "replay"
    assert again["Location"] == "/pay/1" and again["Content-Type"] == "application/json"
    assert again["Content-Length"] == str(len(first.content))
    assert "X-Request-Id" not in again  # not on the allow-list
    assert handler.runs == 1 and handler.attempts[0].outcome == "claimed" and not handler.attempts[0].recovered
    assert handler.attempts[0].key == key and handler.attempts[0].scope == tenant
    assert handler.bodies == [BODY]  # the view reads the body the middleware read


def test_quoted_and_bare_forms_are_one_key(handler, tenant):
    c, key = client(), fresh_key()
    post(c, tenant, f'"{key}"')
    again = post(c, tenant, key)
    assert again["Idempotent-Replayed"] == "true" and handler.runs == 1


def test_key_reused_with_another_request(handler, tenant):
    c, key = client(), fresh_key()
    post(c, tenant, key)
    expect_problem(post(c, tenant, key, b'{"amount": 2000, "currency": "EUR"}'), 422, "key-reused")
    expect_problem(post(c, tenant, key, path="/pay?expand=1"), 422, "key-reused")
    expect_problem(post(c, tenant, key, path="/pay/other"), 422, "key-reused")
    expect_problem(post(c, tenant, key, method="PATCH"), 422, "key-reused")
    expect_problem(post(c, tenant, key, content_type="text/plain"), 422, "key-reused")
    assert post(c, tenant, key)["Idempotency-Outcome"] == "replay"
    assert handler.runs == 1


def test_other_bodies_count_by_their_bytes(handler, tenant):
    c, key = client(), fresh_key()
    post(c, tenant, key, BODY, content_type="text/plain")
    assert post(c, tenant, key, BODY, content_type="text/plain")["Idempotent-Replayed"] == "true"
    expect_problem(post(c, tenant, key, BODY.replace(b": ", b":"), content_type="text/plain"), 422, "key-reused")
    # JSON that jsonb cannot read counts by its bytes too
    bad = fresh_key()
    post(c, tenant, bad, b'{"a": "\\u0000"}')
    assert post(c, tenant, bad, b'{"a": "\\u0000"}')["Idempotent-Replayed"] == "true"
    expect_problem(post(c, tenant, bad, b'{"a":"\\u0000"}'), 422, "key-reused")
    assert handler.runs == 2


def test_tenants_do_not_share_keys(handler, tenant):
    c, key = client(), fresh_key()
    post(c, tenant, key)
    other = post(c, tenant + "-other", key)
    assert other.status_code == 201 and "Idempotent-Replayed" not in other and handler.runs == 2


# ---- what the middleware answers itself ------------------------------------------------------------------------

def test_key_missing(settings, handler, tenant):
    expect_problem(post(client(), tenant, None), 400, "key-missing")
    assert handler.runs == 0
    use(settings, REQUIRED=False)
    passed = post(client(), tenant, None)
    assert passed.status_code == 201 and handler.attempts == [None] and "Idempotency-Outcome" not in passed


@pytest.mark.parametrize("value", ["", '"unclosed', "two words", "one,two", "k" * 256, "caf\xe9"])
def test_key_malformed_whatever_required_says(settings, handler, tenant, value):
    expect_problem(post(client(), tenant, value), 400, "key-malformed")
    use(settings, REQUIRED=False)
    expect_problem(post(client(), tenant, value), 400, "key-malformed")
    assert handler.runs == 0


def test_a_body_over_the_limit_is_refused_unclaimed(settings, handler, tenant):
    use(settings, MAX_BODY_BYTES=16)
    c, key = client(), fresh_key()
    expect_problem(post(c, tenant, key, b'{"amount": 1000000000}'), 413, "body-too-large")
    assert handler.runs == 0
    assert post(c, tenant, key, b'{"amount": 1}').status_code == 201  # the key was not claimed


def test_djangos_own_body_limit_is_the_same_413(settings, handler, tenant):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 8
    expect_problem(post(client(), tenant, fresh_key()), 413, "body-too-large")
    assert handler.runs == 0


def test_other_methods_and_paths_pass_untouched(handler, tenant):
    c = client()
    got = c.get("/pay/1", HTTP_X_TENANT=tenant, HTTP_IDEMPOTENCY_KEY="not a valid key")
    elsewhere = post(c, tenant, None, path="/elsewhere")  # outside PATHS: no key needed
    assert got.status_code == 201 and elsewhere.status_code == 201
    assert handler.attempts == [None, None] and "Idempotency-Outcome" not in got


def test_scope_missing(handler, tenant):
    expect_problem(post(client(), "", fresh_key()), 500, "scope-missing")
    assert handler.runs == 0


def test_store_unavailable(settings, handler, tenant):
    use(settings, DATABASE="down")
    reply = post(client(), tenant, fresh_key())
    expect_problem(reply, 503, "store-unavailable")
    assert reply["Retry-After"] == "1" and handler.runs == 0


# ---- a duplicate while the first runs --------------------------------------------------------------------------

def test_in_progress(handler, tenant):
    release = threading.Event()

    def slow(request, attempt):
        release.wait(10)
        return HttpResponse(b"done", status=201)
    handler.answer = slow
    key = fresh_key()
    first = in_thread(post, client(), tenant, key)
    started(handler)
    busy = post(client(), tenant, key)
    release.set()
    expect_problem(busy, 409, "request-in-progress")
    assert int(busy["Retry-After"]) >= 1 and busy["Idempotency-Outcome"] == "in_progress"
    assert first.result().content == b"done"
    assert post(client(), tenant, key)["Idempotent-Replayed"] == "true" and handler.runs == 1


def test_wait_gets_the_first_answer(settings, handler, tenant):
    use(settings, WAIT=5)

    def slow(request, attempt):
        time.sleep(0.5)
        return HttpResponse(b"done", status=201)
    handler.answer = slow
    key = fresh_key()
    first = in_thread(post, client(), tenant, key)
    started(handler)
    waited = post(client(), tenant, key)
    assert first.result().content == b"done"
    assert waited.content == b"done" and waited["Idempotent-Replayed"] == "true" and handler.runs == 1


# ---- what the view's answer does to the key --------------------------------------------------------------------

@pytest.mark.parametrize("status", [429, 503])
def test_retryable_answer_releases(handler, tenant, status):
    handler.answer = lambda request, attempt: HttpResponse(b"later", status=status)
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == status
    handler.answer = lambda request, attempt: HttpResponse(b"ok", status=201)
    again = post(c, tenant, key, b'{"another": "body"}')  # released: even another body runs
    assert again.status_code == 201 and again["Idempotency-Outcome"] == "claimed" and handler.runs == 2


def test_retryable_statuses_option(settings, handler, tenant):
    use(settings, RETRYABLE_STATUSES=[504])
    handler.answer = lambda request, attempt: HttpResponse(b"x", status=503 if handler.runs == 1 else 504)
    c, key, other = client(), fresh_key(), fresh_key()
    post(c, tenant, key)
    assert post(c, tenant, key)["Idempotent-Replayed"] == "true"  # 503 is stored now
    post(c, tenant, other)
    assert post(c, tenant, other)["Idempotency-Outcome"] == "claimed"  # 504 released


@pytest.mark.parametrize("status", [200, 400, 402, 404, 500])
def test_other_answers_are_stored(handler, tenant, status):
    handler.answer = lambda request, attempt: HttpResponse(b"answer", status=status, content_type="text/plain")
    c, key = client(), fresh_key()
    post(c, tenant, key)
    again = post(c, tenant, key)
    assert again.status_code == status and again.content == b"answer" and again["Idempotent-Replayed"] == "true"
    assert again["Content-Type"] == "text/plain" and handler.runs == 1


def test_an_empty_answer_is_stored(handler, tenant):
    handler.answer = lambda request, attempt: HttpResponse(status=204)
    c, key = client(), fresh_key()
    post(c, tenant, key)
    again = post(c, tenant, key)
    assert again.status_code == 204 and again.content == b"" and again["Idempotent-Replayed"] == "true"


def test_an_exception_releases_and_django_answers_it(handler, tenant):
    def boom(request, attempt):
        raise RuntimeError("boom")
    handler.answer = boom
    c, key = client(), fresh_key()
    failed = post(c, tenant, key)
    assert failed.status_code == 500 and failed["Idempotency-Outcome"] == "claimed"  # Django's own 500 page
    again = post(c, tenant, key)
    assert again.status_code == 500 and again["Idempotency-Outcome"] == "claimed"  # released: it ran again
    assert handler.runs == 2


def test_an_exception_that_propagates_releases(settings, handler, tenant):
    """DEBUG_PROPAGATE_EXCEPTIONS: Django raises instead of answering, through the middleware."""
    settings.DEBUG_PROPAGATE_EXCEPTIONS = True

    def boom(request, attempt):
        raise RuntimeError("boom")
    handler.answer = boom
    key = fresh_key()
    with pytest.raises(RuntimeError, match="boom"):
        post(client(), tenant, key)
    handler.answer = lambda request, attempt: HttpResponse(b"ok", status=201)
    assert post(client(), tenant, key)["Idempotency-Outcome"] == "claimed"


def test_djangos_exception_answers_are_answers(handler, tenant):
    """Http404 and PermissionDenied are how a Django view answers 404 and 403: stored like any answer."""
    from django.http import Http404

    def missing(request, attempt):
        raise Http404("no such thing")
    handler.answer = missing
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 404
    again = post(c, tenant, key)
    assert again.status_code == 404 and again["Idempotent-Replayed"] == "true" and handler.runs == 1


def test_leave_unsettled_then_recovered(settings, handler, tenant):
    use(settings, LEASE=1)

    def unsure(request, attempt):
        if attempt.recovered:
            return HttpResponse(b"reconciled", status=201)
        attempt.leave_unsettled()
        return HttpResponse(b"maybe", status=502)
    handler.answer = unsure
    c, key = client(), fresh_key()
    first = post(c, tenant, key)
    assert first.status_code == 502 and first["Idempotency-Outcome"] == "claimed"
    expect_problem(post(c, tenant, key), 409, "request-in-progress")
    time.sleep(1.2)
    recovered = post(c, tenant, key)
    assert recovered.content == b"reconciled" and recovered["Idempotency-Outcome"] == "recovered"
    assert handler.attempts[-1].recovered


def test_unsettled_wins_over_an_exception(handler, tenant):
    def unsure(request, attempt):
        attempt.leave_unsettled()
        raise RuntimeError("lost the provider's answer")
    handler.answer = unsure
    c, key = client(), fresh_key()
    assert post(c, tenant, key).status_code == 500
    expect_problem(post(c, tenant, key), 409, "request-in-progress")


def test_late_finish_is_fenced(settings, handler, tenant):
    """The first attempt outlives its 1 s lease; the second recovers the key and answers; the first's answer is
    refused by the fencing token (55000), answered 409 lease-lost, never stored."""
    use(settings, LEASE=1)
    second_done = threading.Event()

    def answer(request, attempt):
        if attempt.recovered:
            return HttpResponse(b"second", status=201)
        second_done.wait(10)
        return HttpResponse(b"first", status=201)
    handler.answer = answer
    key = fresh_key()
    late = in_thread(post, client(), tenant, key)
    started(handler)
    time.sleep(1.2)
    taker = post(client(), tenant, key)
    second_done.set()
    late_reply = late.result()
    assert taker.content == b"second" and taker["Idempotency-Outcome"] == "recovered"
    expect_problem(late_reply, 409, "lease-lost")
    assert late_reply["Retry-After"] == "1"
    replay = post(client(), tenant, key)
    assert replay.content == b"second" and replay["Idempotent-Replayed"] == "true"


def test_a_dead_owners_key_is_recovered(handler, tenant):
    """A claim made and abandoned (its process died) is recovered once its lease ends."""
    key = fresh_key()
    # The dead owner's claim, with the same fingerprint the middleware builds.
    outside("SELECT idem_claim(%s, %s, jsonb_build_object('method', 'POST'::text, 'target', '/pay'::text, "
            "'body', %s::jsonb), lease => '1s')", (tenant, key, BODY.decode()))
    c = client()
    expect_problem(post(c, tenant, key), 409, "request-in-progress")
    time.sleep(1.2)
    reply = post(c, tenant, key)
    assert reply.status_code == 201 and handler.attempts[-1].recovered


def test_an_answer_too_large_to_store(handler, tenant):
    big = b"x" * (1024 * 1024 + 1)  # over idem_keys.max_response_bytes' default of 1MB
    handler.answer = lambda request, attempt: HttpResponse(big, status=200)
    c, key = client(), fresh_key()
    reply = post(c, tenant, key)
    expect_problem(reply, 500, "store-failed")
    assert reply["Idempotency-Outcome"] == "claimed"
    expect_problem(post(c, tenant, key), 409, "request-in-progress")  # left claimed until its lease ends


# ---- how the answer is held and stored -------------------------------------------------------------------------

def test_a_streamed_answer_is_held_whole(handler, tenant):
    handler.answer = lambda request, attempt: StreamingHttpResponse(iter([b"one,", b"two,", b"three"]), status=201,
                                                                    content_type="text/csv")
    c, key = client(), fresh_key()
    first = post(c, tenant, key)
    again = post(c, tenant, key)
    assert b"".join(first.streaming_content) == again.content == b"one,two,three"
    assert again["Content-Type"] == "text/csv"


def test_a_file_answer_is_held_whole(handler, tenant, tmp_path):
    path = tmp_path / "receipt.txt"
    path.write_bytes(b"receipt 1")
    handler.answer = lambda request, attempt: FileResponse(open(path, "rb"), status=201)
    c, key = client(), fresh_key()
    first = post(c, tenant, key)
    again = post(c, tenant, key)
    assert b"".join(first.streaming_content) == again.content == b"receipt 1"
    first.close()


def test_stored_headers(settings, handler, tenant):
    def answer(request, attempt):
        return HttpResponse(b"ok", status=201, headers={"X-Trace": "t1", "ETag": '"v1"',
                                                        "Link": "</a>; rel=a, </b>; rel=b"})
    handler.answer = answer
    c, key = client(), fresh_key()
    post(c, tenant, key)
    default = post(c, tenant, key)
    use(settings, STORED_HEADERS=["x-TRACE"])
    c, key = client(), fresh_key()
    post(c, tenant, key)
    custom = post(c, tenant, key)
    assert default["Link"] == "</a>; rel=a, </b>; rel=b" and default["ETag"] == '"v1"'
    assert "X-Trace" not in default and "Content-Type" in default
    assert custom["X-Trace"] == "t1" and "ETag" not in custom and "Content-Type" not in custom


def test_a_form_body_reaches_the_view(handler, tenant):
    """The middleware reads the body first; request.POST is parsed from it afterwards."""
    handler.answer = lambda request, attempt: HttpResponse(json.dumps(dict(request.POST.items())), status=201)
    reply = post(client(), tenant, fresh_key(), b"amount=1000&currency=EUR",
                 content_type="application/x-www-form-urlencoded")
    assert json.loads(reply.content) == {"amount": "1000", "currency": "EUR"}


def test_an_async_view(handler, tenant, tables):
    """An async view behind the (sync) middleware: Django calls it through async_to_sync, and its database calls
    (sync_to_async, as the async ORM makes them) come back to the request's thread and connection."""
    def write(request, attempt):
        with connections["default"].cursor() as cursor:
            cursor.execute("INSERT INTO django_tx_writes VALUES (%s, %s, %s)", (attempt.scope, attempt.key, "async"))
        return HttpResponse(b"async", status=201)
    handler.answer = write
    c, key = client(), fresh_key()
    first = post(c, tenant, key, path="/async")
    again = post(c, tenant, key, path="/async")
    assert first.content == b"async" and again["Idempotent-Replayed"] == "true" and handler.runs == 1
    assert outside("SELECT count(*) FROM django_tx_writes WHERE tenant = %s", (tenant,)) == [(1,)]
