"""Every option of the vocabulary, and every bad value of each refused when the middleware is made, with the
option's name in the error (a duration's says seconds)."""
import inspect
import logging
from datetime import timedelta

import pytest
from psycopg_pool import ConnectionPool

from conftest import tenant_of
from idem_keys_asgi import IdempotencyMiddleware
from idem_keys_core.options import VOCABULARY

pytestmark = pytest.mark.anyio


def app(scope, receive, send):
    raise AssertionError("not called")


def test_the_options_are_the_vocabulary():
    """The shared vocabulary, and pool= (the database), nothing else."""
    parameters = inspect.signature(IdempotencyMiddleware).parameters
    keywords = {name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == set(VOCABULARY) | {"pool"}


@pytest.mark.parametrize(("option", "value", "error", "says"), [
    ("lease", "30s", TypeError, "seconds"),  # PostgreSQL interval strings are no longer taken
    ("lease", "2 minutes", TypeError, "seconds"),
    ("lease", 0, ValueError, "seconds"),
    ("lease", timedelta(0), ValueError, "seconds"),
    ("lease", True, TypeError, "seconds"),
    ("wait", -1, ValueError, "seconds"),
    ("wait", "5", TypeError, "seconds"),
    ("retention", float("inf"), ValueError, "seconds"),
    ("retention", [86400], TypeError, "seconds"),
    ("methods", "POST", TypeError, "HTTP methods"),
    ("methods", ["POST", "TWO WORDS"], ValueError, "HTTP methods"),
    ("required", "yes", TypeError, "True or False"),
    ("retryable_statuses", 429, TypeError, "HTTP statuses"),
    ("retryable_statuses", [429, 700], ValueError, "HTTP statuses"),
    ("stored_headers", "ETag", TypeError, "header names"),
    ("stored_headers", ["Content-Length"], ValueError, "Content-Length"),
    ("stored_headers", ["not a name"], ValueError, "header names"),
    ("outcome_header", "Idempotency Outcome", TypeError, "header name"),
    ("max_body_bytes", 0, ValueError, "bytes"),
    ("max_body_bytes", "1MB", TypeError, "bytes"),
    ("transactional", "yes", TypeError, "True, False or a function"),
    ("logger", "not a logger".encode(), TypeError, "logging.Logger"),
])
async def test_a_bad_option_names_itself(pool, option, value, error, says):
    with pytest.raises(error, match=f"^{option}[: ].*{says}"):
        IdempotencyMiddleware(app, pool=pool, scope=tenant_of, **{option: value})


async def test_good_options(pool):
    mine = logging.getLogger("mine")
    for options in ({"lease": 30, "wait": 0.5, "retention": timedelta(days=1)}, {"wait": 0},
                    {"methods": ["post", "put"], "required": False, "retryable_statuses": [409, 429]},
                    {"stored_headers": ["ETag", "x-trace"], "outcome_header": "Idempotency-Outcome"},
                    {"max_body_bytes": 4096, "transactional": lambda scope: True, "logger": mine},
                    {"logger": "my.logger"}):
        IdempotencyMiddleware(app, pool=pool, scope=tenant_of, **options)


def test_scope_and_pool_are_required(database_url):
    with pytest.raises(TypeError, match="scope="):
        IdempotencyMiddleware(app, pool=object(), scope="tenant")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pool="):
        IdempotencyMiddleware(app, pool=None, scope=tenant_of)  # type: ignore[arg-type]
    sync_pool = ConnectionPool(database_url, open=False)
    with pytest.raises(TypeError, match="AsyncConnectionPool"):
        IdempotencyMiddleware(app, pool=sync_pool, scope=tenant_of, transactional=True)  # type: ignore[arg-type]
