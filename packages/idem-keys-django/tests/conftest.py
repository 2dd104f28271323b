"""The tests run on $DATABASE_URL itself (a database with idem_keys, or its portable edition): no test database
is made, and every test commits for real, as requests do. Each test ends with every connection of its thread
outside any transaction."""
import os
import threading
import uuid

import psycopg
import pytest
from django.db import connections
from django.test import Client
from psycopg.pq import TransactionStatus

from project import views

BODY = b'{"amount": 1000, "currency": "EUR"}'


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test fails: every rule must run, here and in CI."""
    report = yield
    if report.skipped:
        report.outcome, report.longrepr = "failed", f"skipped, which this suite does not allow: {report.longrepr}"
    return report


@pytest.fixture(scope="session")
def django_db_setup():
    """No test database: idem_keys is in $DATABASE_URL's (pytest-django's way to use an existing database)."""


@pytest.fixture(autouse=True)
def database(django_db_blocker):
    with django_db_blocker.unblock():
        yield
        idle()
        connections.close_all()


def idle():
    """Every connection this thread opened is outside any atomic block, and PostgreSQL agrees."""
    for connection in connections.all(initialized_only=True):
        assert not connection.in_atomic_block, f"{connection.alias} is left in an atomic block"
        if connection.connection is not None:
            assert connection.connection.info.transaction_status == TransactionStatus.IDLE, connection.alias


@pytest.fixture(scope="session")
def tables(django_db_blocker):
    """The views' own table, and one whose unique check waits for COMMIT (so a COMMIT can fail)."""
    with django_db_blocker.unblock():
        with connections["default"].cursor() as cursor:
            cursor.execute("CREATE TABLE IF NOT EXISTS django_tx_writes (tenant text NOT NULL, key text NOT NULL, "
                           "outcome text NOT NULL)")
            cursor.execute("CREATE TABLE IF NOT EXISTS django_tx_guard (tenant text NOT NULL, n int NOT NULL, "
                           "UNIQUE (tenant, n) DEFERRABLE INITIALLY DEFERRED)")
        connections.close_all()


@pytest.fixture
def tenant():
    """A scope of its own per test: runs never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}"


def fresh_key():
    return f"k-{uuid.uuid4().hex}"


@pytest.fixture
def handler():
    """The views' answer for this test (project/views.py)."""
    views.handler = views.Handler()
    return views.handler


def client():
    """Django's test client, answering an exception with the 500 page as a server does (not raising it)."""
    return Client(raise_request_exception=False)


def post(c, tenant, key, body=BODY, path="/pay", content_type="application/json", method="POST", drf=False,
         **extra):
    headers = {("HTTP_X_DRF_TENANT" if drf else "HTTP_X_TENANT"): tenant, **extra}
    if key is not None:
        headers["HTTP_IDEMPOTENCY_KEY"] = key
    return c.generic(method, path, body, content_type=content_type, **headers)


def expect_problem(reply, status, code):
    assert reply.status_code == status, reply.content
    assert reply["Content-Type"] == "application/problem+json"
    body = reply.json()
    assert list(body) == ["type", "title", "status", "detail", "code"]
    assert (body["type"], body["status"], body["code"]) == ("about:blank", status, code)


def in_thread(fn, *args, **kwargs):
    """Runs fn (a request) in a thread of its own, with its own connections (closed at its end); .result()
    waits for it, bounded."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # surfaced by result()
            box["error"] = e
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    class Pending:
        @staticmethod
        def result(timeout=30):
            thread.join(timeout)
            assert not thread.is_alive(), "the request did not end in time"
            if "error" in box:
                raise box["error"]
            return box["value"]
    return Pending


def outside(sql, params=()):
    """sql on a connection of its own, outside Django's (which may be in the request's transaction)."""
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def writes(tenant):
    """The rows the views wrote for this tenant, as another transaction sees them."""
    return [tuple(r) for r in outside("SELECT key, outcome FROM django_tx_writes WHERE tenant = %s "
                                      "ORDER BY key, outcome", (tenant,))]


def stored(tenant, key):
    """The key as another connection sees it: "replay", "in_progress", or None when no row is committed."""
    return outside("SELECT (idem_lookup(%s, %s)).outcome", (tenant, key))[0][0]
