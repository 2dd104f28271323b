"""Fixtures: every test runs twice, on $DATABASE_URL_EXTENSION (CREATE EXTENSION idem_keys) and on
$DATABASE_URL_PORTABLE (the portable edition, installed by the database's owner), each with an autocommit pool
and a scope of its own; a fake Lambda context whose remaining time runs down for real."""
from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from idem_keys_powertools import IdemKeysPersistenceLayer

EDITIONS = {"extension": "DATABASE_URL_EXTENSION", "portable": "DATABASE_URL_PORTABLE"}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A skipped test fails: every rule must run, on both editions, here and in CI."""
    report = yield
    if report.skipped:
        report.outcome, report.longrepr = "failed", f"skipped, which this suite does not allow: {report.longrepr}"
    return report


@pytest.fixture(params=sorted(EDITIONS))
def database_url(request: pytest.FixtureRequest) -> str:
    variable = EDITIONS[request.param]
    url = os.environ.get(variable)
    if not url:
        pytest.fail(f"{variable} must name a database with idem_keys ({request.param}); test.sh says so too")
    return url


@pytest.fixture
def pool(database_url: str) -> Iterator[ConnectionPool[Any]]:
    with ConnectionPool(database_url, min_size=1, max_size=8, kwargs={"autocommit": True}) as pool:
        yield pool


@pytest.fixture
def scope() -> str:
    """A scope of its own per test: runs never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def layer(pool: ConnectionPool[Any], scope: str) -> IdemKeysPersistenceLayer:
    return IdemKeysPersistenceLayer(scope=scope, pool=pool)


class FakeContext:
    """What Powertools reads of a LambdaContext: get_remaining_time_in_millis, from a deadline that passes."""

    function_name = "orders"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:orders"

    def __init__(self, remaining_ms: int = 30_000, request_id: str = "req-1") -> None:
        self._deadline = time.monotonic() + remaining_ms / 1000
        self.aws_request_id = request_id

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def lookup(pool: ConnectionPool[Any], scope: str, key: str) -> tuple[Any, ...]:
    """idem_lookup of a key, straight from SQL: (outcome, response_bytes, headers, retry_after)."""
    with pool.connection() as conn:
        row = conn.execute("SELECT r.outcome, r.response_bytes, r.headers, r.retry_after "
                           "FROM idem_lookup(%s, %s) AS r", (scope, key)).fetchone()
    assert row is not None
    return tuple(row)


def requests_made(pool: ConnectionPool[Any]) -> int:
    """Connections the pool handed out since the last call: 0 means no statement ran."""
    return int(pool.pop_stats().get("requests_num", 0))


class InThread:
    """Runs a call in a thread and keeps what it returned or raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = call()
            except BaseException as e:  # noqa: BLE001 - handed to the test
                self.error = e

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the call did not end within 30 s"
        if self.error is not None:
            raise self.error
        return self.result
