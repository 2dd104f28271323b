"""The tests run on $DATABASE_URL itself (a database with idem_keys, or its portable edition): no test database
is made, and every test commits for real, as requests do. Each test ends with every connection of its thread
outside any transaction."""
import sys
from pathlib import Path

# The contract's loader (contract.py) and the rule that a skip fails (no_skips.py) are the core's test helpers,
# shared by every Python package's tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "idem-keys-core" / "tests"))
from no_skips import pytest_runtest_makereport  # noqa: E402,F401  (a hook: pytest finds it here)

import os
import threading
import uuid

import psycopg
import pytest
from django.db import connections
from django.test import Client
from psycopg.pq import TransactionStatus

import contract
from project import views

BODY = b'{"amount": 1000, "currency": "EUR"}'


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


CONTRACT_PROBLEMS = contract.load("problems")
PROBLEMS = {row["code"]: row for row in CONTRACT_PROBLEMS["problems"]}


def expect_problem(reply, status, code):
    """The problem as contract/problems.json has it: its bytes, status, Content-Type and Retry-After."""
    row = PROBLEMS[code]
    assert reply.status_code == row["status"] == status, reply.content
    assert reply.content == row["body"].encode()
    assert reply["Content-Type"] == CONTRACT_PROBLEMS["content_type"]
    assert reply["Content-Length"] == str(len(reply.content))
    retry_after = reply.get("Retry-After")
    if row["retry_after"] == "lease":  # the claim's own, at least a second
        assert int(retry_after) >= 1
    else:
        assert retry_after == (None if row["retry_after"] is None else str(row["retry_after"]))


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
