"""A request cancelled wherever it waits on the database never keeps a pool connection, in either mode: at the
BEGIN, the claim, the finish, the COMMIT (before it is sent, and while the server runs it), the ROLLBACK of a
replay, a duplicate, a mismatch, a retryable answer or an exception, the release, and the claim's server-side
wait. Two ways of cancelling: asyncio's Task.cancel (once), and anyio's cancel scope (Starlette's task groups),
which cancels every later await of the task again until the scope is left. The test holds the request at the
chosen point (a connection class whose method waits at a gate, or the server's own COMMIT), cancels it there, then
lets the held call go on; small_pool then requires every connection back in the pool, idle, and a later request
must be served."""
import asyncio
import os
from datetime import timedelta

import anyio
import httpx
import psycopg
import pytest
from starlette.responses import Response

from conftest import fresh_key
from test_middleware import Handler, post
from test_transactional import small_pool, stored, tables, tx_app, writes, writing  # noqa: F401 (tables: a fixture)

pytestmark = pytest.mark.anyio


class Gate:
    """Holds the first call at `point` after `arm()` until `go` is set; `reached` says it is held."""

    def __init__(self, point):
        self.point = point
        self.armed = False
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    def arm(self):
        self.armed = True

    async def at(self, point):
        if self.armed and point == self.point and not self.reached.is_set():
            self.reached.set()
            await self.go.wait()


def gated(gate):
    """A psycopg connection class whose statements, COMMIT and ROLLBACK pass the gate first."""
    class Gated(psycopg.AsyncConnection):
        async def execute(self, query, params=None, **kwargs):
            await gate.at(_point_of(str(query)))
            return await super().execute(query, params, **kwargs)

        async def commit(self):
            await gate.at("commit")
            await super().commit()

        async def rollback(self):
            await gate.at("rollback")
            await super().rollback()
    return Gated


def _point_of(query):
    for verb in ("idem_claim", "idem_finish", "idem_release"):
        if verb in query:
            return verb.removeprefix("idem_")
    return "begin" if query.strip().upper() == "BEGIN" else "other"


async def cancel_at(request, style, held, release=lambda: None):
    """Runs request, cancels it once held() says it is held where the test wants it, then calls release(). The
    request must end cancelled."""
    if style == "task":
        task = asyncio.create_task(request)
        await _until(held, task)
        task.cancel()
        release()
        with pytest.raises(asyncio.CancelledError):
            await task
        return
    scope = anyio.CancelScope()

    async def run():
        with scope:
            await request
    task = asyncio.create_task(run())
    await _until(held, task)
    scope.cancel()
    release()
    await task
    assert scope.cancelled_caught


async def at_gate(gate, request, style):
    async def held():
        return gate.reached.is_set()
    await cancel_at(request, style, held, gate.go.set)


async def _until(held, task):
    async with asyncio.timeout(10):
        while not await held():
            assert not task.done(), f"the request ended before the test could cancel it: {task.result()}"
            await asyncio.sleep(0.01)


def client_for(app):
    # An exception the handler raises on purpose reaches Starlette's error page, not the test.
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                             base_url="http://test")


async def claim_outside(pool, tenant, key, lease="1 hour"):
    """Another owner's claim, committed, with the fingerprint the middleware builds for post()'s default body."""
    async with pool.connection() as conn:
        await conn.execute("SELECT idem_claim(%s, %s, jsonb_build_object('method', 'POST'::text, 'target', "
                           "'/pay'::text, 'body', '{\"amount\": 1000, \"currency\": \"EUR\"}'::jsonb), "
                           "lease => %s::interval)", (tenant, key, lease))


def boom(request, attempt):
    raise RuntimeError("boom")


# What the request under test runs into at its gate: (the point, the handler's answer, how the key was set up).
TRANSACTIONAL = {
    "begin": ("begin", None, None),
    "claim": ("claim", None, None),
    "finish": ("finish", None, None),
    "commit": ("commit", None, None),
    "replay's rollback": ("rollback", None, "finished"),
    "in-progress's rollback": ("rollback", None, "claimed elsewhere"),
    "mismatch's rollback": ("rollback", None, "finished, another body"),
    "retryable answer's rollback": ("rollback", lambda r, a: Response(b"later", 503), None),
    "exception's rollback": ("rollback", boom, None),
}
DEFAULT = {
    "claim": ("claim", None, None),
    "finish": ("finish", None, None),
    "release": ("release", boom, None),
}
STYLES = ["task", "cancel scope"]


async def _set_up(client, pool, tenant, key, setup):
    """The key as the request under test must find it; the body that request sends."""
    body = b'{"amount": 1000, "currency": "EUR"}'
    if setup in ("finished", "finished, another body"):
        assert (await post(client, tenant, key)).status_code == 201
    elif setup == "claimed elsewhere":
        await claim_outside(pool, tenant, key)
    return b'{"amount": 2000, "currency": "EUR"}' if setup == "finished, another body" else body


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("where", list(TRANSACTIONAL))
async def test_transactional_cancelled_gives_the_connection_back(database_url, pool, tables, tenant, where, style,
                                                                  caplog):
    point, answer, setup = TRANSACTIONAL[where]
    gate = Gate(point)
    async with small_pool(database_url, connection_class=gated(gate)) as one:
        handler, key = Handler(writing(answer)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            body = await _set_up(client, pool, tenant, key, setup)
            gate.arm()
            await at_gate(gate, post(client, tenant, key, body), style)
            handler.answer = writing()
            after = await post(client, tenant, fresh_key())  # the one connection is back, and works
    assert after.status_code == 201 and after.headers["idempotency-outcome"] == "claimed"
    if point == "commit":
        # Held before psycopg sent the COMMIT: nothing was committed, and the log says so. (A COMMIT cancelled
        # while the server runs it: test_cancelled_while_the_commit_runs_on_the_server.)
        assert "cancelled before the COMMIT of the 201 answer was sent: nothing was committed" in caplog.text
        assert "is unknown" not in caplog.text
    if setup is None:
        # Nothing of the cancelled request committed (held before its COMMIT at the latest): the key is free.
        assert await stored(pool, tenant, key) is None
        assert [row for row in await writes(pool, tenant) if row[0] == key] == []


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "not autocommit"])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("where", list(DEFAULT))
async def test_default_mode_cancelled_gives_the_connection_back(database_url, tenant, where, style, autocommit):
    point, answer, setup = DEFAULT[where]
    gate = Gate(point)
    async with small_pool(database_url, autocommit=autocommit, connection_class=gated(gate)) as one:
        handler = Handler(answer)
        async with client_for(tx_app(handler, one, transactional=False)) as client:
            gate.arm()
            await at_gate(gate, post(client, tenant, fresh_key()), style)
            handler.answer = Handler().answer
            after = await post(client, tenant, fresh_key())
    assert after.status_code == 201 and after.headers["idempotency-outcome"] == "claimed"


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "default"])
@pytest.mark.parametrize("style", STYLES)
async def test_cancelled_while_the_claim_waits(database_url, pool, tables, tenant, transactional, style):
    """With `wait`, idem_claim waits in the server for the key's owner; a cancellation there cancels that
    statement (psycopg asks the server to) and the connection still goes back."""
    name = f"idem-asgi-wait-{tenant}"

    async def waiting():
        with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
            return conn.execute("SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = %s AND "
                                "state = 'active' AND query LIKE '%%idem_claim%%'", (name,)).fetchone()[0]
    async with small_pool(database_url, size=2, application_name=name) as two:
        key = fresh_key()
        await claim_outside(two, tenant, key)
        handler = Handler(writing() if transactional else None)
        app = tx_app(handler, two, transactional=transactional, wait=timedelta(seconds=30))
        async with client_for(app) as client:
            await cancel_at(post(client, tenant, key), style, waiting)
            after = await post(client, tenant, fresh_key())
    assert after.status_code == 201


@pytest.fixture
async def commit_sleeps(pool):
    """A table whose deferred constraint trigger sleeps at COMMIT: a request whose handler writes there is still in
    its COMMIT, on the server, for that long."""
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS asgi_tx_slow_commit (tenant text NOT NULL, key text NOT NULL)")
        await conn.execute("CREATE OR REPLACE FUNCTION asgi_tx_sleep_at_commit() RETURNS trigger LANGUAGE plpgsql "
                           f"AS $$ BEGIN PERFORM pg_sleep({COMMIT_SECONDS}); RETURN NULL; END $$")
        await conn.execute("DROP TRIGGER IF EXISTS asgi_tx_sleep_at_commit ON asgi_tx_slow_commit")
        await conn.execute("CREATE CONSTRAINT TRIGGER asgi_tx_sleep_at_commit AFTER INSERT ON asgi_tx_slow_commit "
                           "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION asgi_tx_sleep_at_commit()")


# Long enough to be seen running in pg_stat_activity and cancelled there; the test waits it out at most once.
COMMIT_SECONDS = 2


def commit_running(name):
    """Whether a session of application_name `name` is running a COMMIT on the server now."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        return conn.execute("SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = %s AND "
                            "state = 'active' AND query = 'COMMIT'", (name,)).fetchone()[0]


@pytest.mark.parametrize("style", STYLES)
async def test_cancelled_while_the_commit_runs_on_the_server(database_url, pool, tables, commit_sleeps, tenant, style,
                                                             caplog):
    """The COMMIT is on the server (a deferred trigger sleeps in it) when the request is cancelled. psycopg asks
    the server to cancel it and waits for its answer (a single cancellation), or, cancelled again while doing so
    (a cancel scope), closes the connection with the COMMIT still running, which may then commit. Either way the
    outcome is logged as unknown, the connection goes back to the pool (idle, or closed and replaced), and a retry
    with the same key tells which it was: the stored answer replayed if it committed, a fresh run if it did not,
    with the handler's write committed exactly once."""
    name = f"idem-asgi-commit-{tenant}"

    async def slow_commit(request, attempt):
        await attempt.connection.execute("INSERT INTO asgi_tx_slow_commit VALUES (%s, %s)", (attempt.scope,
                                                                                             attempt.key))
        return Response(b"paid", 201)

    async def committing():
        return commit_running(name)
    async with small_pool(database_url, application_name=name) as one:
        handler, key = Handler(writing(slow_commit)), fresh_key()
        async with client_for(tx_app(handler, one)) as client:
            await cancel_at(post(client, tenant, key), style, committing)
            assert "cancelled during the commit of the 201 answer, whose outcome is unknown" in caplog.text
            async with asyncio.timeout(COMMIT_SECONDS + 10):  # the server ends the COMMIT, one way or the other
                while commit_running(name) or one.get_stats()["pool_available"] < 1:
                    await asyncio.sleep(0.05)
            committed = [row for row in await writes(pool, tenant) if row[0] == key] == [(key, "claimed")]
            assert await stored(pool, tenant, key) == ("replay" if committed else None)
            handler.answer = writing()
            again = await post(client, tenant, key)
            runs = handler.runs
            after = await post(client, tenant, fresh_key())  # the pool serves the next request
    assert again.status_code == 201 and after.status_code == 201
    if committed:
        assert again.headers["idempotent-replayed"] == "true" and again.content == b"paid" and runs == 1
    else:
        assert "idempotent-replayed" not in again.headers and again.headers["idempotency-outcome"] == "claimed"
        assert runs == 2
    assert [row for row in await writes(pool, tenant) if row[0] == key] == [(key, "claimed")]
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM asgi_tx_slow_commit WHERE tenant = %s", (tenant,))
        assert (await cur.fetchone())[0] == (1 if committed else 0)
