"""PostgreSQL ends every session of the pool under the middleware, as a restart or a failover does (here
pg_terminate_backend of the pool's sessions, found by their application_name, so no other session is touched):
new keys are answered 201 again within a few requests, in both modes, on the same pool and app. A dead
connection costs at most one 503 store-unavailable before the pool replaces it; every key answered 201 wrote
exactly one row, every other none."""
import os

import psycopg
import pytest
from starlette.responses import Response

from conftest import client_for, fresh_key
from test_middleware import Handler, post
from test_transactional import small_pool, tables, tx_app, writes, writing  # noqa: F401 (tables: a fixture)

pytestmark = pytest.mark.anyio
SIZE = 3


def end_sessions(application_name):
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                             "WHERE application_name = %s", (application_name,)).fetchone()[0]
    assert ended == SIZE  # the pool's sessions, all of them


def writing_on(pool):
    """The default mode's handler: its row on a connection of its own from the pool, committed at once."""
    async def answer(request, attempt):
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO asgi_tx_writes VALUES (%s, %s, %s)", (attempt.scope, attempt.key,
                                                                                  attempt.outcome))
        return Response(b"paid", 201)
    return answer


@pytest.mark.parametrize("transactional", [False, True], ids=["default", "transactional"])
async def test_new_keys_are_answered_again_after_the_sessions_end(database_url, pool, tables, tenant, transactional):
    name = f"idem-asgi-restart-{tenant}"
    async with small_pool(database_url, size=SIZE, application_name=name) as sized:
        handler = Handler(writing() if transactional else writing_on(sized))
        async with client_for(tx_app(handler, sized, transactional=transactional)) as client:
            assert (await post(client, tenant, fresh_key())).status_code == 201
            end_sessions(name)
            answers = {}
            for _ in range(2 * SIZE + 2):  # bounded: one 503 per dead connection at most, then 201s
                key = fresh_key()
                answers[key] = (await post(client, tenant, key)).status_code
                if list(answers.values())[-SIZE:] == [201] * SIZE:
                    break
    statuses = list(answers.values())
    assert statuses[-SIZE:] == [201] * SIZE, statuses
    assert set(statuses) <= {201, 503} and statuses.count(503) <= SIZE, statuses
    rows = [key for key, _ in await writes(pool, tenant)]
    for key, status in answers.items():
        assert rows.count(key) == (1 if status == 201 else 0), (key, status)
