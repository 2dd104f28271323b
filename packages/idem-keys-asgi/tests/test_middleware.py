"""The middleware on a Starlette app, against a real idem_keys database ($DATABASE_URL): every row of the
behaviour tables in docs/integrations.md."""
import asyncio
import json
import secrets
from datetime import timedelta

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware import Middleware
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

import contract
from conftest import Authenticate, client_for, fresh_key, tenant_of
from idem_keys_asgi import IdempotencyMiddleware

pytestmark = pytest.mark.anyio
BODY = b'{"amount": 1000, "currency": "EUR"}'
CONTRACT_PROBLEMS = contract.load("problems")
PROBLEMS = {row["code"]: row for row in CONTRACT_PROBLEMS["problems"]}


class Handler:
    """A route whose answer each test chooses; it counts its runs and keeps the attempts it saw."""

    def __init__(self, answer=None):
        self.answer = answer or (lambda request, attempt: Response(b'{"b": 1,  "a": 2}', 201, headers={
            "Content-Type": "application/json", "Location": "/pay/1", "X-Request-Id": secrets.token_hex(4)}))
        self.attempts = []
        self.bodies = []

    async def endpoint(self, request):
        attempt = getattr(request.state, "idempotency", None)
        self.attempts.append(attempt)
        self.bodies.append(await request.body())
        answer = self.answer(request, attempt)
        return await answer if asyncio.iscoroutine(answer) else answer

    @property
    def runs(self):
        return len(self.attempts)


async def started(handler, timeout=5.0):
    """Waits, bounded, until the handler has begun its first run."""
    async with asyncio.timeout(timeout):
        while handler.runs == 0:
            await asyncio.sleep(0.01)


def app_for(handler, pool, **options):
    """The way an application adds it: app.add_middleware / middleware=[...], inside Starlette's error handling."""
    options.setdefault("scope", tenant_of)
    options.setdefault("outcome_header", "Idempotency-Outcome")
    return Starlette(routes=[Route("/{path:path}", handler.endpoint, methods=["GET", "POST", "PATCH", "PUT"])],
                     middleware=[Middleware(Authenticate), Middleware(IdempotencyMiddleware, pool=pool, **options)])


async def post(client, tenant, key, body=BODY, path="/pay", content_type="application/json", method="POST",
               headers=()):
    sent = [("X-Tenant", tenant), ("Content-Type", content_type)] + list(headers)
    if key is not None:
        sent.append(("Idempotency-Key", key))
    return await client.request(method, path, content=body, headers=sent)


def expect_problem(reply, status, code):
    """The problem as contract/problems.json has it: its bytes, status, Content-Type and Retry-After."""
    row = PROBLEMS[code]
    assert reply.status_code == row["status"] == status, reply.text
    assert reply.content == row["body"].encode()
    assert reply.headers["content-type"] == CONTRACT_PROBLEMS["content_type"]
    assert reply.headers["content-length"] == str(len(reply.content))
    retry_after = reply.headers.get("retry-after")
    if row["retry_after"] == "lease":  # the claim's own, at least a second
        assert int(retry_after) >= 1
    else:
        assert retry_after == (None if row["retry_after"] is None else str(row["retry_after"]))


# ---- claim and replay ------------------------------------------------------------------------------------------

async def test_claim_then_replay_byte_for_byte(pool, tenant):
    handler, key = Handler(), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        first = await post(client, tenant, key)
        again = await post(client, tenant, f'"{key}"')  # the quoted form is the same key
    assert first.status_code == 201 and first.headers["idempotency-outcome"] == "claimed"
    assert "idempotent-replayed" not in first.headers
    attempt = handler.attempts[0]
    assert (attempt.scope, attempt.key, attempt.outcome, attempt.recovered) == (tenant, key, "claimed", False)
    assert isinstance(attempt.token, int)
    assert handler.bodies == [BODY]  # the app read the body the middleware had already read
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.headers["idempotency-outcome"] == "replay"
    assert again.content == first.content == b'{"b": 1,  "a": 2}'  # the bytes, not a jsonb re-rendering
    assert again.headers["content-type"] == "application/json" and again.headers["location"] == "/pay/1"
    assert again.headers["content-length"] == str(len(first.content))
    assert "x-request-id" in first.headers and "x-request-id" not in again.headers  # not on the allow-list
    assert handler.runs == 1


async def test_key_reused_with_another_request(pool, tenant):
    handler, key = Handler(), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        assert (await post(client, tenant, key)).status_code == 201
        others = [await post(client, tenant, key, b'{"amount": 2000, "currency": "EUR"}'),
                  await post(client, tenant, key, path="/pay?expand=customer"),
                  await post(client, tenant, key, path="/other"),
                  await post(client, tenant, key, content_type="text/plain"),
                  await post(client, tenant, key, method="PATCH")]
    for reply in others:
        expect_problem(reply, 422, "key-reused")
        assert reply.headers["idempotency-outcome"] == "mismatch"
    assert handler.runs == 1


async def test_other_bodies_count_by_their_bytes(pool, tenant):
    handler = Handler()
    plain, broken = fresh_key(), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        await post(client, tenant, plain, BODY, content_type="text/plain")
        same = await post(client, tenant, plain, BODY, content_type="text/plain; charset=utf-8")
        respaced = await post(client, tenant, plain, BODY.replace(b": ", b":"), content_type="text/plain")
        # Says JSON but jsonb cannot read it (22P02, and a \u0000 is 22P05): its bytes fingerprint it.
        for body in (b'{"amount": ', b'{"a": "\\u0000"}', b"\xff\xfe"):
            key = fresh_key()
            first = await post(client, tenant, key, body)
            again = await post(client, tenant, key, body)
            assert first.status_code == 201 and again.headers["idempotent-replayed"] == "true", body
    assert same.headers["idempotent-replayed"] == "true"
    expect_problem(respaced, 422, "key-reused")
    assert handler.runs == 4


async def test_tenants_do_not_share_keys(pool, tenant):
    handler, key = Handler(), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        mine = await post(client, tenant, key)
        theirs = await post(client, tenant + "-other", key, b'{"other": true}')
    assert mine.headers["idempotency-outcome"] == theirs.headers["idempotency-outcome"] == "claimed"


# ---- what the middleware answers itself ------------------------------------------------------------------------

async def test_key_missing(pool, tenant):
    handler = Handler()
    async with client_for(app_for(handler, pool)) as client:
        expect_problem(await post(client, tenant, None), 400, "key-missing")
    async with client_for(app_for(handler, pool, required=False)) as client:
        passed = await post(client, tenant, None)
    assert passed.status_code == 201 and "idempotency-outcome" not in passed.headers
    assert handler.attempts == [None]  # the handler ran, without idempotency


async def test_a_body_over_the_limit_is_refused_unclaimed(pool, tenant):
    handler = Handler()
    key = fresh_key()
    async with client_for(app_for(handler, pool, max_body_bytes=64)) as client:
        expect_problem(await post(client, tenant, key, body=b'{"pad": "' + b"x" * 64 + b'"}'), 413, "body-too-large")
        assert handler.runs == 0
        # Nothing was claimed: the key is free for a body within the limit.
        assert (await post(client, tenant, key)).status_code == 201
    with pytest.raises(ValueError):
        IdempotencyMiddleware(handler.endpoint, pool=pool, scope=tenant_of, max_body_bytes=0)


async def test_key_malformed_whatever_required_says(pool, tenant):
    handler = Handler()
    for required in (True, False):
        async with client_for(app_for(handler, pool, required=required)) as client:
            for value in ("two words", '"unclosed', "k" * 256, "", '"k";p=1'):
                expect_problem(await post(client, tenant, value), 400, "key-malformed")
            twice = await post(client, tenant, None, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
            expect_problem(twice, 400, "key-malformed")
    assert handler.runs == 0


async def test_other_methods_pass_untouched(pool, tenant):
    handler = Handler(lambda request, attempt: Response(b"ok", 200))
    async with client_for(app_for(handler, pool)) as client:
        for method in ("GET", "PUT"):
            reply = await client.request(method, "/pay", headers={"X-Tenant": tenant, "Idempotency-Key": "not valid"})
            assert reply.status_code == 200 and "idempotency-outcome" not in reply.headers
        patch = await post(client, tenant, fresh_key(), method="PATCH")
    assert handler.attempts[:2] == [None, None]
    assert patch.headers["idempotency-outcome"] == "claimed"  # PATCH is configured by default
    async with client_for(app_for(handler, pool, methods=("put",))) as client:
        put = await post(client, tenant, fresh_key(), method="PUT")
        post_passes = await post(client, tenant, "not valid")
    assert put.headers["idempotency-outcome"] == "claimed" and post_passes.status_code == 200


async def test_scope_missing(pool, tenant):
    handler = Handler()
    async with client_for(app_for(handler, pool)) as client:
        reply = await client.post("/pay", content=BODY, headers={"Idempotency-Key": fresh_key()})  # no X-Tenant
    expect_problem(reply, 500, "scope-missing")
    assert handler.runs == 0


async def test_async_scope_function(pool, tenant):
    async def scope(asgi_scope):
        await asyncio.sleep(0)
        return asgi_scope["state"]["tenant"]
    handler = Handler()
    async with client_for(app_for(handler, pool, scope=scope)) as client:
        assert (await post(client, tenant, fresh_key())).status_code == 201
    assert handler.attempts[0].scope == tenant


async def test_constructing_without_scope_is_an_error(pool):
    with pytest.raises(TypeError):
        IdempotencyMiddleware(Handler(), pool=pool)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        IdempotencyMiddleware(Handler(), pool=pool, scope=None)  # type: ignore[arg-type]
    app = Starlette(middleware=[Middleware(IdempotencyMiddleware, pool=pool)])
    with pytest.raises(TypeError, match="scope"):  # Starlette builds its middleware at the first call
        await app({"type": "lifespan"}, None, None)


async def test_store_unavailable(tenant):
    # Port 1 on loopback: nothing listens, every connection attempt fails at once.
    async with AsyncConnectionPool("postgres://postgres@127.0.0.1:1/postgres", min_size=1, timeout=1,
                                   open=False) as dead:
        handler = Handler()
        async with client_for(app_for(handler, dead)) as client:
            reply = await post(client, tenant, fresh_key())
    expect_problem(reply, 503, "store-unavailable")
    assert reply.headers["retry-after"] == "1" and "idempotency-outcome" not in reply.headers
    assert handler.runs == 0


# ---- while the first attempt runs ------------------------------------------------------------------------------

async def test_in_progress(pool, tenant):
    release = asyncio.Event()

    async def slow(request, attempt):
        await release.wait()
        return Response(b"done", 201)
    handler, key = Handler(slow), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        first = asyncio.create_task(post(client, tenant, key))
        await started(handler)
        busy = await post(client, tenant, key)
        release.set()
        done = await first
        after = await post(client, tenant, key)
    expect_problem(busy, 409, "request-in-progress")
    assert int(busy.headers["retry-after"]) >= 1 and busy.headers["idempotency-outcome"] == "in_progress"
    assert done.status_code == 201 and after.headers["idempotent-replayed"] == "true"
    assert handler.runs == 1


async def test_wait_gets_the_first_answer(pool, tenant):
    async def slow(request, attempt):
        await asyncio.sleep(0.5)
        return Response(secrets.token_hex(8).encode(), 201)
    handler, key = Handler(slow), fresh_key()
    async with client_for(app_for(handler, pool, wait=5)) as client:
        first = asyncio.create_task(post(client, tenant, key))
        await started(handler)
        waited = await post(client, tenant, key)
        done = await first
    assert waited.headers["idempotent-replayed"] == "true" and waited.content == done.content
    assert handler.runs == 1


# ---- what the handler's answer does to the key ------------------------------------------------------------------

@pytest.mark.parametrize("status", [429, 503])
async def test_retryable_answer_releases(pool, tenant, status):
    handler, key = Handler(lambda request, attempt: Response(b"busy", status, headers={"Retry-After": "1"})), \
        fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        refused = await post(client, tenant, key)
        handler.answer = Handler().answer
        again = await post(client, tenant, key, b'{"another": "body"}')  # released: free even for another body
    assert refused.status_code == status and refused.headers["retry-after"] == "1"
    assert refused.headers["idempotency-outcome"] == "claimed" and "idempotent-replayed" not in refused.headers
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"


async def test_retryable_statuses_option(pool, tenant):
    handler, key = Handler(lambda request, attempt: Response(b"try again", 409)), fresh_key()
    async with client_for(app_for(handler, pool, retryable_statuses=(409,))) as client:
        await post(client, tenant, key)
        again = await post(client, tenant, key)
    assert again.headers["idempotency-outcome"] == "claimed" and handler.runs == 2


@pytest.mark.parametrize("status", [400, 402, 404, 500, 502])
async def test_other_answers_are_stored(pool, tenant, status):
    body = json.dumps({"error": status, "detail": secrets.token_hex(4)}).encode()
    handler = Handler(lambda request, attempt: Response(body, status, media_type="application/problem+json"))
    key = fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        first = await post(client, tenant, key)
        again = await post(client, tenant, key)
    assert first.status_code == again.status_code == status and again.content == first.content == body
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["content-type"] == "application/problem+json"
    assert handler.runs == 1


async def test_an_empty_answer_is_stored(pool, tenant):
    handler, key = Handler(lambda request, attempt: Response(status_code=204)), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        await post(client, tenant, key)
        again = await post(client, tenant, key)
    assert again.status_code == 204 and again.content == b"" and again.headers["idempotent-replayed"] == "true"


async def test_exception_releases_and_goes_on(pool, tenant):
    def boom(request, attempt):
        raise RuntimeError("boom")
    handler, key = Handler(boom), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        with pytest.raises(RuntimeError, match="boom"):  # the framework's own error path: the exception goes on
            await post(client, tenant, key)
    # Starlette's ServerErrorMiddleware answers it 500, outside every added middleware.
    app = app_for(handler, pool)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://test") as client:
        second = await post(client, tenant, key)
        handler.answer = Handler().answer
        third = await post(client, tenant, key, b'{"another": "body"}')
    assert second.status_code == 500
    assert [a.outcome for a in handler.attempts] == ["claimed", "claimed", "claimed"]  # released every time
    assert third.status_code == 201


async def test_an_exception_after_the_answer_leaves_it_stored(pool, tenant):
    def fail():
        raise RuntimeError("background task failed")
    handler = Handler(lambda request, attempt: Response(b"paid", 201, background=BackgroundTask(fail)))
    key = fresh_key()
    app = app_for(handler, pool)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://test") as client:
        first = await post(client, tenant, key)
        again = await post(client, tenant, key)
    assert first.status_code == 201 and first.content == b"paid"
    assert again.headers["idempotent-replayed"] == "true" and handler.runs == 1


async def test_leave_unsettled_then_recovered(pool, tenant):
    def maybe_charged(request, attempt):
        if not attempt.recovered:
            attempt.leave_unsettled()
            return Response(b"provider did not answer", 502)
        return Response(b"reconciled", 201)
    handler, key = Handler(maybe_charged), fresh_key()
    async with client_for(app_for(handler, pool, lease=timedelta(seconds=1))) as client:
        first = await post(client, tenant, key)
        busy = await post(client, tenant, key)
        await asyncio.sleep(1.2)
        recovered = await post(client, tenant, key)
    assert first.status_code == 502 and first.headers["idempotency-outcome"] == "claimed"
    expect_problem(busy, 409, "request-in-progress")
    assert recovered.status_code == 201 and recovered.headers["idempotency-outcome"] == "recovered"
    assert handler.attempts[-1].recovered


async def test_unsettled_wins_over_an_exception(pool, tenant):
    def unsure(request, attempt):
        attempt.leave_unsettled()
        raise RuntimeError("lost the provider's answer")
    handler, key = Handler(unsure), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        with pytest.raises(RuntimeError):
            await post(client, tenant, key)
        expect_problem(await post(client, tenant, key), 409, "request-in-progress")


async def test_late_finish_is_fenced(pool, tenant):
    """The first attempt outlives its 1 s lease; the second recovers the key and answers; the first's answer is
    refused by the fencing token (55000), answered 409 lease-lost, never stored."""
    second_done = asyncio.Event()

    async def answer(request, attempt):
        if attempt.recovered:
            return Response(b"second", 201)
        await second_done.wait()
        return Response(b"first", 201)
    handler, key = Handler(answer), fresh_key()
    async with client_for(app_for(handler, pool, lease=1)) as client:
        late = asyncio.create_task(post(client, tenant, key))
        await asyncio.sleep(1.2)
        taker = await post(client, tenant, key)
        second_done.set()
        late_reply = await late
        replay = await post(client, tenant, key)
    assert taker.content == b"second" and taker.headers["idempotency-outcome"] == "recovered"
    expect_problem(late_reply, 409, "lease-lost")
    assert late_reply.headers["retry-after"] == "1"
    assert replay.content == b"second" and replay.headers["idempotent-replayed"] == "true"


async def test_a_dead_owners_key_is_recovered(pool, tenant):
    """A claim made and abandoned (its process died) is recovered once its lease ends."""
    key = fresh_key()
    handler = Handler()
    app = app_for(handler, pool, lease=1)
    async with client_for(app) as client:
        async with pool.connection() as conn:
            # The dead owner's claim, with the same fingerprint the middleware builds.
            await conn.execute("SELECT idem_claim(%s, %s, jsonb_build_object('method', 'POST'::text, "
                               "'target', '/pay'::text, 'body', %s::jsonb), lease => '1s')",
                               (tenant, key, BODY.decode()))
        expect_problem(await post(client, tenant, key), 409, "request-in-progress")
        await asyncio.sleep(1.2)
        reply = await post(client, tenant, key)
    assert reply.status_code == 201 and handler.attempts[-1].recovered


async def test_an_answer_too_large_to_store(pool, tenant):
    big = b"x" * (1024 * 1024 + 1)  # over idem_keys.max_response_bytes' default of 1MB
    handler, key = Handler(lambda request, attempt: Response(big, 200)), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        reply = await post(client, tenant, key)
        after = await post(client, tenant, key)
    expect_problem(reply, 500, "store-failed")
    assert reply.headers["idempotency-outcome"] == "claimed"
    expect_problem(after, 409, "request-in-progress")  # left claimed until its lease ends


# ---- how the answer is held and stored -------------------------------------------------------------------------

async def test_a_streamed_answer_is_held_whole(pool, tenant):
    async def chunks():
        for part in (b"one,", b"two,", b"three"):
            await asyncio.sleep(0)
            yield part
    handler = Handler(lambda request, attempt: StreamingResponse(chunks(), 201, media_type="text/csv"))
    key = fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        first = await post(client, tenant, key)
        again = await post(client, tenant, key)
    assert first.content == again.content == b"one,two,three"
    assert again.headers["content-type"].startswith("text/csv")


async def test_stored_headers(pool, tenant):
    def answer(request, attempt):
        response = Response(b"ok", 201, headers={"X-Trace": "t1", "ETag": '"v1"'})
        response.raw_headers += [(b"link", b"</a>; rel=a"), (b"link", b"</b>; rel=b")]
        return response
    handler = Handler(answer)
    async with client_for(app_for(handler, pool)) as client:
        key = fresh_key()
        await post(client, tenant, key)
        default = await post(client, tenant, key)
    async with client_for(app_for(handler, pool, stored_headers=("x-TRACE",))) as client:
        key = fresh_key()
        await post(client, tenant, key)
        custom = await post(client, tenant, key)
    assert default.headers["link"] == "</a>; rel=a, </b>; rel=b" and default.headers["etag"] == '"v1"'
    assert "x-trace" not in default.headers
    assert custom.headers["x-trace"] == "t1" and "etag" not in custom.headers


async def test_a_chunked_request_body_reaches_the_app_whole(pool, tenant):
    async def parts():
        yield b'{"amount": '
        yield b'1000, "currency": "EUR"}'
    handler, key = Handler(), fresh_key()
    async with client_for(app_for(handler, pool)) as client:
        await client.post("/pay", content=parts(), headers={"X-Tenant": tenant, "Idempotency-Key": key,
                                                            "Content-Type": "application/json"})
        again = await post(client, tenant, key, BODY)
    assert handler.bodies == [BODY] and again.headers["idempotent-replayed"] == "true"


async def test_a_pool_without_autocommit(database_url, tenant):
    async with AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False) as plain:
        handler, key = Handler(), fresh_key()
        async with client_for(app_for(handler, plain)) as client:
            first = await post(client, tenant, key)
            again = await post(client, tenant, key)
    assert first.status_code == 201 and again.headers["idempotent-replayed"] == "true" and handler.runs == 1
