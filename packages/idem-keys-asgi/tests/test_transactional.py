"""Transactional mode (transactional=...), against a real idem_keys database ($DATABASE_URL): the claim, the
handler's writes (on request.state.idempotency.connection) and the stored answer commit together, once, or not at
all. Most tests run on a pool of ONE connection: a connection left out of the pool, or left in a transaction, would
fail the next request there (503 store-unavailable after the pool's timeout), and every test ends by checking that
all of the pool's connections are back in it, idle."""
import asyncio
from contextlib import asynccontextmanager
from datetime import timedelta

import anyio
import httpx
import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from starlette.background import BackgroundTask
from starlette.responses import Response

from conftest import client_for, fresh_key, tenant_of
from idem_keys_asgi import IdempotencyMiddleware
from test_middleware import PROBLEMS, Handler, app_for, expect_problem, post, started

pytestmark = pytest.mark.anyio
COMMIT_UNKNOWN = PROBLEMS["commit-unknown"]["body"].encode()  # contract/problems.json's bytes
COMMIT_FAILED = PROBLEMS["commit-failed"]["body"].encode()


@pytest.fixture
async def tables(pool):
    """The handler's own table, and one whose unique check waits for COMMIT (so a COMMIT can fail)."""
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS asgi_tx_writes (tenant text NOT NULL, key text NOT NULL, "
                           "outcome text NOT NULL)")
        await conn.execute("CREATE TABLE IF NOT EXISTS asgi_tx_guard (tenant text NOT NULL, n int NOT NULL, "
                           "UNIQUE (tenant, n) DEFERRABLE INITIALLY DEFERRED)")


@asynccontextmanager
async def small_pool(database_url, size=1, autocommit=True, connection_class=psycopg.AsyncConnection,
                     application_name=None):
    """A pool of `size` connections that gives up on a missing one after 2 s; on the way out, every connection
    must be back in it and idle: none leaked, none left in a transaction."""
    kwargs = {"autocommit": True} if autocommit else {}
    if application_name:
        kwargs["application_name"] = application_name
    async with AsyncConnectionPool(database_url, min_size=size, max_size=size, timeout=2, kwargs=kwargs,
                                   connection_class=connection_class, open=False) as pool:
        await pool.wait(timeout=5)
        yield pool
        async with asyncio.timeout(5):  # a rollback shielded from a cancellation may still be on its way
            while (stats := pool.get_stats())["pool_available"] < size:
                await asyncio.sleep(0.02)
        assert stats.get("requests_waiting", 0) == 0
        for _ in range(size):  # each is idle: taking them all at once would fail on a leak
            async with pool.connection() as conn:
                assert conn.info.transaction_status == TransactionStatus.IDLE


async def writes(pool, tenant):
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT key, outcome FROM asgi_tx_writes WHERE tenant = %s ORDER BY key, outcome",
                                 (tenant,))
        return await cur.fetchall()


async def stored(pool, tenant, key):
    """The key as another connection sees it: "replay", "in_progress", or None when no row is committed."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT (idem_lookup(%s, %s)).outcome", (tenant, key))
        return (await cur.fetchone())[0]


def writing(then=None):
    """An answer that first writes one row on the middleware's connection, then answers `then` (201 by default)."""
    async def answer(request, attempt):
        conn = attempt.connection
        assert conn is not None and conn.info.transaction_status == TransactionStatus.INTRANS
        await conn.execute("INSERT INTO asgi_tx_writes VALUES (%s, %s, %s)", (attempt.scope, attempt.key,
                                                                              attempt.outcome))
        reply = then(request, attempt) if then else Response(b"paid", 201, headers={"Location": "/pay/1"})
        return await reply if asyncio.iscoroutine(reply) else reply
    return answer


def tx_app(handler, pool, **options):
    options.setdefault("transactional", True)
    return app_for(handler, pool, **options)


async def test_one_commit_holds_the_write_and_the_answer(database_url, pool, tables, tenant):
    seen_outside = []
    after_answer = []

    async def look_from_outside(request, attempt):
        # Another connection sees neither the write nor the claim's row until the one COMMIT.
        seen_outside.append((await writes(pool, tenant), await stored(pool, tenant, attempt.key)))
        return Response(b"paid", 201, headers={"Location": "/pay/1"},
                        background=BackgroundTask(lambda: after_answer.append(attempt.connection)))
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(look_from_outside)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            first = await post(client, tenant, key)
            again = await post(client, tenant, key)
        assert first.status_code == 201 and first.content == b"paid"
        assert first.headers["idempotency-outcome"] == "claimed"
        assert again.status_code == 201 and again.content == b"paid" and again.headers["location"] == "/pay/1"
        assert again.headers["idempotent-replayed"] == "true"
        assert handler.runs == 1
        assert seen_outside == [([], None)]
        assert after_answer == [None]  # once committed, the connection is the pool's again
        assert handler.attempts[0].connection is None
        assert await writes(pool, tenant) == [(key, "claimed")]


async def test_an_exception_rolls_back_the_write_and_frees_the_key(database_url, pool, tables, tenant):
    def boom(request, attempt):
        raise RuntimeError("boom after the write")
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(boom)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            with pytest.raises(RuntimeError, match="boom"):  # the exception goes on, as outside the mode
                await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key, b'{"another": "body"}')  # free at once, for any request
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]  # the second's only


@pytest.mark.parametrize("status", [429, 503])
async def test_a_retryable_answer_rolls_back_and_frees_the_key(database_url, pool, tables, tenant, status):
    async with small_pool(database_url) as one:
        handler = Handler(writing(lambda request, attempt: Response(b"busy", status, headers={"Retry-After": "1"})))
        key = fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            refused = await post(client, tenant, key)
            assert await writes(pool, tenant) == []
            handler.answer = writing()
            again = await post(client, tenant, key, b'{"another": "body"}')
    assert refused.status_code == status and refused.content == b"busy" and refused.headers["retry-after"] == "1"
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_a_failed_commit_is_503_commit_failed_and_nothing_stays(database_url, pool, tables, tenant):
    async def deferred_violation(request, attempt):
        # Accepted now, refused by the unique check at COMMIT (23505): after the finish, before the client.
        await attempt.connection.execute("INSERT INTO asgi_tx_guard VALUES (%s, 1), (%s, 1)", (tenant, tenant))
        return Response(b"paid", 201)
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(deferred_violation)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            failed = await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key)
    assert failed.status_code == 503 and failed.content == COMMIT_FAILED
    assert failed.headers["content-type"] == "application/problem+json"
    assert failed.headers["retry-after"] == "1" and failed.headers["idempotency-outcome"] == "claimed"
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"  # nothing was stored
    assert "idempotent-replayed" not in again.headers
    assert await writes(pool, tenant) == [(key, "claimed")]  # the second's only


@pytest.fixture
async def commit_kills_the_session(pool):
    """A table whose deferred constraint trigger ends its own session at COMMIT (pg_terminate_backend of itself):
    the COMMIT's answer is FATAL 57P01 and a closed connection, and nothing is committed."""
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS asgi_tx_commit_kill (tenant text NOT NULL)")
        await conn.execute("CREATE OR REPLACE FUNCTION asgi_tx_end_own_session() RETURNS trigger LANGUAGE plpgsql "
                           "AS $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$")
        await conn.execute("DROP TRIGGER IF EXISTS asgi_tx_end_own_session ON asgi_tx_commit_kill")
        await conn.execute("CREATE CONSTRAINT TRIGGER asgi_tx_end_own_session AFTER INSERT ON asgi_tx_commit_kill "
                           "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION asgi_tx_end_own_session()")


async def test_a_commit_whose_answer_is_lost_is_503_commit_unknown(database_url, pool, tables, tenant,
                                                                   commit_kills_the_session, caplog):
    async def session_ends_at_commit(request, attempt):
        await attempt.connection.execute("INSERT INTO asgi_tx_commit_kill VALUES (%s)", (tenant,))
        return Response(b"paid", 201)
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(session_ends_at_commit)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            unknown = await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key)  # it did not commit: the retry runs afresh
            later = await post(client, tenant, fresh_key())  # the lost connection was replaced, not reused
    assert unknown.status_code == 503 and unknown.content == COMMIT_UNKNOWN
    assert unknown.headers["content-type"] == "application/problem+json"
    assert unknown.headers["retry-after"] == "1" and unknown.headers["idempotency-outcome"] == "claimed"
    assert "outcome of the commit of the 201 answer is unknown" in caplog.text
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert "idempotent-replayed" not in again.headers
    assert later.status_code == 201
    assert [row for row in await writes(pool, tenant) if row[0] == key] == [(key, "claimed")]


async def test_unsettled_then_raised_on_a_lost_connection_committed_nothing(database_url, pool, tables, tenant,
                                                                           caplog):
    """The handler left the key unsettled, then a statement of its saw the session end, and it raised: the COMMIT
    of the unsettled claim is never sent, and the server rolled the transaction back with the session. That is
    known, not unknown: the log says nothing was committed, and the retry runs afresh."""
    async def unsure_then_lost(request, attempt):
        attempt.leave_unsettled()
        await attempt.connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(unsure_then_lost)), fresh_key()
        app = tx_app(handler, one)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                     base_url="http://test") as client:
            lost = await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key)
    assert lost.status_code == 500  # the handler's exception, through Starlette's own error page
    assert ("the connection was lost before the COMMIT of the unsettled claim, which was not sent: nothing was "
            "committed") in caplog.text
    assert "is unknown" not in caplog.text
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]  # the retry's only


@pytest.mark.parametrize("unsettled", [True, False], ids=["unsettled", "an answer to store"])
async def test_a_connection_lost_before_the_commit_committed_nothing(database_url, pool, tables, tenant, unsettled,
                                                                     caplog):
    """The handler's statement saw its session end, and the handler answered anyway: the server rolled the
    transaction back with the session, and the COMMIT is not sent. Unsettled (no answer to store, so straight to
    the COMMIT): 503 commit-failed, as in every package. With an answer to store: 500 store-failed, as a finish on
    the lost connection would fail."""
    async def answers_on_a_lost_session(request, attempt):
        try:
            await attempt.connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        except psycopg.OperationalError:
            pass  # the handler goes on regardless
        if unsettled:
            attempt.leave_unsettled()
        return Response(b"paid", 201)
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(answers_on_a_lost_session)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            lost = await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key)
    if unsettled:
        assert lost.status_code == 503 and lost.content == COMMIT_FAILED and lost.headers["retry-after"] == "1"
    else:
        expect_problem(lost, 500, "store-failed")
    assert lost.headers["idempotency-outcome"] == "claimed"
    what = "the unsettled 201 answer" if unsettled else "the 201 answer"
    assert f"the connection was lost before the COMMIT of {what}, which was not sent: nothing was committed" in (
        caplog.text)
    assert "is unknown" not in caplog.text
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]  # the retry's only


async def test_an_answer_that_cannot_be_stored_rolls_everything_back(database_url, pool, tables, tenant):
    big = b"x" * (1024 * 1024 + 1)  # over idem_keys.max_response_bytes' default: idem_finish refuses it
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(lambda request, attempt: Response(big, 200))), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            failed = await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key)
    expect_problem(failed, 500, "store-failed")
    # Unlike two-step mode, the claim went with the rest: the key is free, not claimed until its lease ends.
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_unsettled_commits_the_write_and_the_claim_unfinished(database_url, pool, tables, tenant):
    def maybe_charged(request, attempt):
        if attempt.recovered:
            return Response(b"reconciled", 201)
        attempt.leave_unsettled()
        return Response(b"provider did not answer", 502)
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(maybe_charged)), fresh_key()
        async with client_for(tx_app(handler, one, lease=timedelta(seconds=1))) as client:
            first = await post(client, tenant, key)
            assert await writes(pool, tenant) == [(key, "claimed")]  # committed, answer or not
            busy = await post(client, tenant, key)
            await asyncio.sleep(1.2)
            recovered = await post(client, tenant, key)
    assert first.status_code == 502 and first.content == b"provider did not answer"
    expect_problem(busy, 409, "request-in-progress")
    assert recovered.status_code == 201 and recovered.headers["idempotency-outcome"] == "recovered"
    assert await writes(pool, tenant) == [(key, "claimed"), (key, "recovered")]


async def test_unsettled_wins_over_an_exception(database_url, pool, tables, tenant):
    """As outside the mode: a handler that left the key unsettled and then raised keeps its claim (its outcome
    is unknown), so the claim and its writes commit, unfinished."""
    def unsure(request, attempt):
        attempt.leave_unsettled()
        raise RuntimeError("lost the provider's answer")
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(unsure)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            with pytest.raises(RuntimeError):
                await post(client, tenant, key)
            expect_problem(await post(client, tenant, key), 409, "request-in-progress")
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_a_duplicate_while_the_first_transaction_is_open_is_409_at_once(database_url, pool, tables, tenant):
    go_on = asyncio.Event()

    async def held(request, attempt):
        await go_on.wait()
        return Response(b"first", 201)
    async with small_pool(database_url, size=2) as two:
        handler, key = Handler(writing(held)), fresh_key()
        async with client_for(tx_app(handler, two)) as client:
            first = asyncio.create_task(post(client, tenant, key))
            await started(handler)
            async with asyncio.timeout(1.5):  # at once: it does not wait for the first transaction
                busy = await post(client, tenant, key)
            go_on.set()
            done = await first
            after = await post(client, tenant, key)
    expect_problem(busy, 409, "request-in-progress")
    assert busy.headers["retry-after"] == "1" and busy.headers["idempotency-outcome"] == "in_progress"
    assert done.status_code == 201 and after.content == b"first" and after.headers["idempotent-replayed"] == "true"
    assert handler.runs == 1 and await writes(pool, tenant) == [(key, "claimed")]


async def test_a_duplicate_that_waits_gets_the_first_answer(database_url, pool, tables, tenant):
    async def slow(request, attempt):
        await asyncio.sleep(0.5)
        return Response(b"first, after a while", 201)
    async with small_pool(database_url, size=2) as two:
        handler, key = Handler(writing(slow)), fresh_key()
        async with client_for(tx_app(handler, two, wait=5)) as client:
            first = asyncio.create_task(post(client, tenant, key))
            await started(handler)
            waited = await post(client, tenant, key)
            done = await first
    assert done.status_code == 201 and waited.content == done.content
    assert waited.headers["idempotent-replayed"] == "true" and handler.runs == 1


async def test_every_outcome_gives_the_connection_back(database_url, pool, tables, tenant):
    """On one connection: a claim, its replay, a mismatch, a body that says JSON but is not (the claim's
    transaction starts over for the bytes fingerprint), each followed by a request that needs the connection."""
    async with small_pool(database_url) as one:
        handler, key, broken = Handler(writing()), fresh_key(), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            replies = [await post(client, tenant, key), await post(client, tenant, key),
                       await post(client, tenant, key, b'{"other": 1}'),
                       await post(client, tenant, broken, b'{"amount": '), await post(client, tenant, broken,
                                                                                   b'{"amount": ')]
    assert [r.headers["idempotency-outcome"] for r in replies] == ["claimed", "replay", "mismatch", "claimed",
                                                                   "replay"]
    assert handler.runs == 2


async def test_a_cancelled_request_rolls_back_and_gives_the_connection_back(database_url, pool, tables, tenant):
    """anyio's cancel scopes (Starlette's task groups) cancel every await inside them again and again, the
    rollback's too: it runs shielded, so the connection still goes back."""
    async def forever(request, attempt):
        await asyncio.Event().wait()
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(forever)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            with anyio.move_on_after(0.5) as scope:
                await post(client, tenant, key)
            assert scope.cancelled_caught and handler.runs == 1
            handler.answer = writing()
            again = await post(client, tenant, key)  # waits for the one connection, then finds the key free
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_a_broken_connection_is_replaced_not_returned(database_url, pool, tables, tenant):
    async def kill_own_backend(request, attempt):
        await attempt.connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(kill_own_backend)), fresh_key()
        app = tx_app(handler, one)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                     base_url="http://test") as client:
            lost = await post(client, tenant, key)
            handler.answer = writing()
            again = await post(client, tenant, key)
    assert lost.status_code == 500  # the handler's error, through Starlette's own error page
    assert again.status_code == 201 and again.headers["idempotency-outcome"] == "claimed"
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_a_handler_that_commits_itself_is_not_stored(database_url, pool, tables, tenant):
    async def commits(request, attempt):
        await attempt.connection.commit()  # forbidden by the docs: the middleware can no longer vouch for it
        return Response(b"paid", 201)
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(commits)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            reply = await post(client, tenant, key)
    expect_problem(reply, 500, "store-failed")


async def test_savepoints_are_the_handlers(database_url, pool, tables, tenant):
    async def with_savepoint(request, attempt):
        conn = attempt.connection
        try:
            async with conn.transaction():  # a savepoint inside the middleware's transaction
                await conn.execute("INSERT INTO asgi_tx_writes VALUES (%s, %s, 'undone')", (tenant, attempt.key))
                await conn.execute("SELECT 1/0")
        except Exception:
            pass
        return Response(b"paid", 201)
    async with small_pool(database_url) as one:
        handler, key = Handler(writing(with_savepoint)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            first = await post(client, tenant, key)
            again = await post(client, tenant, key)
    assert first.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_per_route(database_url, pool, tables, tenant):
    """transactional= as a function of the ASGI scope picks the routes that run in a transaction."""
    in_transaction = []

    def answer(request, attempt):
        in_transaction.append(attempt.connection is not None)
        return Response(b"ok", 201)
    async with small_pool(database_url) as one:
        handler = Handler(answer)
        app = tx_app(handler, one, transactional=lambda scope: scope["path"].startswith("/tx/"))
        async with client_for(app) as client:
            replies = [await post(client, tenant, fresh_key(), path=path) for path in ("/tx/pay", "/plain/pay")]
    assert [r.headers["idempotency-outcome"] for r in replies] == ["claimed", "claimed"]
    assert in_transaction == [True, False]


async def test_a_pool_without_autocommit(database_url, pool, tables, tenant):
    async with small_pool(database_url, autocommit=False) as plain:
        handler, key = Handler(writing()), fresh_key()
        async with client_for(tx_app(handler, plain)) as client:
            first = await post(client, tenant, key)
            again = await post(client, tenant, key)
    assert first.status_code == 201 and again.headers["idempotent-replayed"] == "true" and handler.runs == 1
    assert await writes(pool, tenant) == [(key, "claimed")]


async def test_store_unavailable(tenant):
    async with AsyncConnectionPool("postgres://postgres@127.0.0.1:1/postgres", min_size=1, timeout=1,
                                   open=False) as dead:
        handler = Handler()
        async with client_for(tx_app(handler, dead)) as client:
            reply = await post(client, tenant, fresh_key())
    expect_problem(reply, 503, "store-unavailable")
    assert reply.headers["retry-after"] == "1" and handler.runs == 0


async def test_a_bad_configuration_is_refused_at_construction(database_url, pool):
    for transactional in ("yes", 1, None):
        with pytest.raises(TypeError, match="transactional"):
            IdempotencyMiddleware(Handler().endpoint, pool=pool, scope=tenant_of, transactional=transactional)
    sync_pool = ConnectionPool(database_url, open=False)
    for bad_pool in (sync_pool, object()):
        with pytest.raises(TypeError, match="AsyncConnectionPool"):
            IdempotencyMiddleware(Handler().endpoint, pool=bad_pool, scope=tenant_of, transactional=True)
        with pytest.raises(TypeError, match="AsyncConnectionPool"):
            IdempotencyMiddleware(Handler().endpoint, pool=bad_pool, scope=tenant_of, transactional=lambda s: False)
    # Outside the mode nothing more is asked of the pool than before.
    IdempotencyMiddleware(Handler().endpoint, pool=pool, scope=tenant_of, transactional=False)
    IdempotencyMiddleware(Handler().endpoint, pool=pool, scope=tenant_of, transactional=lambda s: True)
