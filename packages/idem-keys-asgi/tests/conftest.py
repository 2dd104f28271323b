"""Fixtures for the database-backed tests: an autocommit pool on $DATABASE_URL (a database with idem_keys, or its
portable edition), and an httpx client that talks to an ASGI app in-process."""
import sys
from pathlib import Path

# The contract's loader (contract.py) and the rule that a skip fails (no_skips.py) are the core's test helpers,
# shared by every Python package's tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "idem-keys-core" / "tests"))
from no_skips import pytest_runtest_makereport  # noqa: E402,F401  (a hook: pytest finds it here)

import os
import uuid

import httpx
import pytest
from psycopg_pool import AsyncConnectionPool


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def database_url():
    url = os.environ.get("DATABASE_URL")
    if not url:
        pytest.fail("DATABASE_URL must name a database with idem_keys (test.sh says so too)")
    return url


@pytest.fixture
async def pool(database_url):
    async with AsyncConnectionPool(database_url, min_size=1, max_size=8, kwargs={"autocommit": True},
                                   open=False) as pool:
        yield pool


@pytest.fixture
def tenant():
    """A scope of its own per test: runs never see each other's keys."""
    return f"test-{uuid.uuid4().hex[:12]}"


def fresh_key():
    return f"k-{uuid.uuid4().hex}"


def tenant_of(scope):
    """The tests' stand-in for authentication: it runs outside the middleware and puts the tenant in the state."""
    return scope.get("state", {}).get("tenant")


class Authenticate:
    """Sets scope["state"]["tenant"] from X-Tenant. A real app takes it from verified credentials, never from a
    header the client chooses; for these tests, which tenant is what matters, not how it was proven."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            tenant = dict(scope["headers"]).get(b"x-tenant")
            scope.setdefault("state", {})["tenant"] = tenant.decode() if tenant else None
        await self.app(scope, receive, send)


def client_for(app):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
