"""The function's exception, keys that are missing or long, the local cache, the lease, and the layer's
options, with the released decorators on both editions (conftest.py)."""
from __future__ import annotations

import time
import warnings
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyKeyError, IdempotencyValidationError
from conftest import FakeContext, InThread, lookup, requests_made
from psycopg_pool import ConnectionPool

from idem_keys_powertools import IdemKeysPersistenceLayer, store_key

ORDER = {"order_id": "o-1", "amount": 1000}


class Declined(Exception):
    pass


def test_exception_releases_the_key(layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any],
                                    scope: str) -> None:
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        if len(runs) == 1:
            raise Declined("card declined")
        return {"n": len(runs)}

    # The function's own exception reaches the caller, unwrapped, and the key is given back...
    with pytest.raises(Declined):
        handler(ORDER, FakeContext())
    assert lookup(pool, scope, layer._get_hashed_idempotency_key(ORDER) or "")[0] is None
    # ...so the retry runs, and its result is stored.
    assert handler(ORDER, FakeContext()) == {"n": 2}
    assert handler(ORDER, FakeContext()) == {"n": 2}
    assert len(runs) == 2


def test_stale_invocations_exception_leaves_the_new_owners_record(layer: IdemKeysPersistenceLayer) -> None:
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(context.aws_request_id)
        if context.aws_request_id == "A":
            time.sleep(1.2)  # past A's lease
            InThread(lambda: handler(ORDER, FakeContext(request_id="B"))).join()
            raise Declined("A failed late")
        return {"by": context.aws_request_id}

    # A's release is refused quietly (idem_release: false), so A's own exception is what its caller sees.
    with pytest.raises(Declined):
        handler(ORDER, FakeContext(remaining_ms=1000, request_id="A"))
    assert handler(ORDER, FakeContext(request_id="C")) == {"by": "B"}
    assert runs == ["A", "B"]


def test_raise_on_no_idempotency_key(layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any]) -> None:
    runs = []

    @idempotent(persistence_store=layer,
                config=IdempotencyConfig(event_key_jmespath="order_id", raise_on_no_idempotency_key=True))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"ok": True}

    requests_made(pool)
    with pytest.raises(IdempotencyKeyError):
        handler({"amount": 1000}, FakeContext())
    assert runs == []
    assert requests_made(pool) == 0
    assert handler(ORDER, FakeContext()) == {"ok": True}


def test_without_raise_on_no_idempotency_key_the_function_runs_unguarded(
        layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any]) -> None:
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"n": len(runs)}

    requests_made(pool)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert handler({"amount": 1000}, FakeContext()) == {"n": 1}
        assert handler({"amount": 1000}, FakeContext()) == {"n": 2}
    assert any("No idempotency key value found" in str(w.message) for w in caught)
    assert requests_made(pool) == 0  # nothing claimed, nothing stored


def test_local_cache_answers_without_the_database(pool: ConnectionPool[Any], scope: str) -> None:
    config = IdempotencyConfig(event_key_jmespath="order_id", payload_validation_jmespath="amount",
                               use_local_cache=True)
    runs = []

    def charge(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order)
        return {"n": len(runs)}

    writer = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                 persistence_store=IdemKeysPersistenceLayer(scope=scope, pool=pool), config=config)
    assert writer(order=ORDER) == {"n": 1}
    requests_made(pool)
    assert writer(order=ORDER) == {"n": 1}  # from the cache its own result filled
    assert requests_made(pool) == 0
    # Validation still applies to a cached record.
    with pytest.raises(IdempotencyValidationError):
        writer(order={**ORDER, "amount": 5})

    # Another instance (another Lambda): the first replay reads the database, and fills its cache.
    reader = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                 persistence_store=IdemKeysPersistenceLayer(scope=scope, pool=pool),
                                 config=IdempotencyConfig(event_key_jmespath="order_id",
                                                          payload_validation_jmespath="amount",
                                                          use_local_cache=True))
    assert reader(order=ORDER) == {"n": 1}
    assert requests_made(pool) == 1
    assert reader(order=ORDER) == {"n": 1}
    assert requests_made(pool) == 0
    assert len(runs) == 1


def test_lease_is_the_lambdas_remaining_time(layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any],
                                             scope: str) -> None:
    seen: dict[str, int] = {}

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        key = layer._get_hashed_idempotency_key(event) or ""
        seen[event["order_id"]] = lookup(pool, scope, key)[3]  # retry_after: whole seconds left, rounded up
        return {}

    handler(ORDER, FakeContext(remaining_ms=20_000))
    assert 18 <= seen["o-1"] <= 20
    # No longer than the record's expiry (expires_after_seconds, 1 h by default)...
    handler({**ORDER, "order_id": "o-2"}, FakeContext(remaining_ms=15 * 3600 * 1000))
    assert 3598 <= seen["o-2"] <= 3600


def lease_seen(layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any], scope: str,
               config: IdempotencyConfig | None = None) -> int:
    """Calls an @idempotent_function with no Lambda context registered and returns the claim's lease as the
    database has it inside the function: idem_lookup's retry_after, whole seconds left, rounded up."""
    seen = []

    @idempotent_function(data_keyword_argument="order", persistence_store=layer,
                         config=config or IdempotencyConfig(event_key_jmespath="order_id"))
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        seen.append(lookup(pool, scope, layer._get_hashed_idempotency_key(order) or "")[3])
        return {}

    charge(order=ORDER)  # Powertools warns that it cannot tell the remaining time (pyproject.toml hides it)
    return int(seen[0])


def test_without_a_lambda_context_the_lease_is_60_seconds(layer: IdemKeysPersistenceLayer,
                                                           pool: ConnectionPool[Any], scope: str) -> None:
    assert layer.lease == timedelta(seconds=60)
    assert 59 <= lease_seen(layer, pool, scope) <= 60


def test_without_a_lambda_context_the_lease_is_the_lease_option(pool: ConnectionPool[Any], scope: str) -> None:
    assert 6 <= lease_seen(IdemKeysPersistenceLayer(scope=scope, pool=pool, lease=7), pool, scope) <= 7
    # No further than the record's expiry (expires_after_seconds).
    other = scope + ":short-expiry"
    config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=30)
    long_lease = IdemKeysPersistenceLayer(scope=other, pool=pool, lease=timedelta(minutes=2))
    assert 29 <= lease_seen(long_lease, pool, other, config) <= 30


def test_with_a_lambda_context_the_lease_option_is_not_used(pool: ConnectionPool[Any], scope: str) -> None:
    layer = IdemKeysPersistenceLayer(scope=scope, pool=pool, lease=7)
    seen: dict[str, int] = {}

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        # A few milliseconds of work first: the shortest lease (1 ms) is then surely over when it looks, and a
        # lease of the option's 7 s surely not.
        time.sleep(0.005)
        seen[event["order_id"]] = lookup(pool, scope, layer._get_hashed_idempotency_key(event) or "")[3]
        return {}

    handler(ORDER, FakeContext(remaining_ms=20_000))
    assert 19 <= seen["o-1"] <= 20
    # 0 ms left is a Lambda about to be killed, not a missing context (Powertools 3 sets the in-progress expiry
    # to now): the shortest lease, over by the time the function looks.
    handler({**ORDER, "order_id": "o-2"}, FakeContext(remaining_ms=0))
    assert seen["o-2"] == 0


def test_lease_and_wait_options_are_checked(pool: ConnectionPool[Any], scope: str) -> None:
    for bad_type in ("60", None, True):
        with pytest.raises(TypeError, match="lease must be a number of seconds or a timedelta"):
            IdemKeysPersistenceLayer(scope=scope, pool=pool, lease=bad_type)  # type: ignore[arg-type]
    for bad_value in (0, -1, 0.0004, timedelta(0), float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lease must"):
            IdemKeysPersistenceLayer(scope=scope, pool=pool, lease=bad_value)
    with pytest.raises(TypeError, match="wait must be a number of seconds or a timedelta"):
        IdemKeysPersistenceLayer(scope=scope, pool=pool, wait="5")  # type: ignore[arg-type]
    assert IdemKeysPersistenceLayer(scope=scope, pool=pool, lease=0.001).lease == timedelta(milliseconds=1)
    assert IdemKeysPersistenceLayer(scope=scope, pool=pool, lease=timedelta(minutes=5)).lease == timedelta(minutes=5)


def test_long_keys_are_hashed_without_collisions(layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any],
                                                 scope: str) -> None:
    runs = []

    def named(qualname: str) -> Any:
        """A function whose qualified name (part of Powertools' key) is qualname: Powertools 3.0 has no
        key_prefix, so a long key comes from a long name."""
        def charge(order: dict[str, Any]) -> dict[str, Any]:
            runs.append(order)
            return {"n": len(runs)}

        charge.__qualname__ = qualname
        return charge

    long_name = "p" * 300
    first = idempotent_function(named(long_name + "a"), data_keyword_argument="order", persistence_store=layer)
    second = idempotent_function(named(long_name + "b"), data_keyword_argument="order", persistence_store=layer)
    assert first(order=ORDER) == {"n": 1}
    assert first(order=ORDER) == {"n": 1}
    assert second(order=ORDER) == {"n": 2}  # shares 300 leading characters, not the key
    powertools_key = layer._get_hashed_idempotency_key(ORDER) or ""
    stored = store_key(powertools_key)
    assert len(powertools_key) > 255 and stored.startswith("sha256:") and "#" not in stored
    assert lookup(pool, scope, stored)[0] == "replay"
    # Keys that fit are kept as they are, readable in idem_keys.
    assert store_key("orders.handler#0123") == "orders.handler#0123"
    assert store_key("é" * 127 + "#") == "é" * 127 + "#" and store_key("é" * 128 + "#").startswith("sha256:")


def test_scope_is_required_and_separates(pool: ConnectionPool[Any], database_url: str, scope: str) -> None:
    with pytest.raises(TypeError):
        IdemKeysPersistenceLayer(pool=pool)  # type: ignore[call-arg]
    for bad in ("", "s" * 256):
        with pytest.raises(ValueError):
            IdemKeysPersistenceLayer(scope=bad, pool=pool)
    with pytest.raises(ValueError):
        IdemKeysPersistenceLayer(scope=scope)
    with pytest.raises(ValueError):
        IdemKeysPersistenceLayer(scope=scope, pool=pool, conninfo=database_url)
    with pytest.raises(ValueError):
        IdemKeysPersistenceLayer(scope=scope, pool=pool, wait=-1)

    runs = []

    def charge(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order)
        return {"n": len(runs)}

    acme = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                               persistence_store=IdemKeysPersistenceLayer(scope=scope + ":acme", pool=pool))
    globex = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                 persistence_store=IdemKeysPersistenceLayer(scope=scope + ":globex", pool=pool))
    assert acme(order=ORDER) == {"n": 1}
    assert globex(order=ORDER) == {"n": 2}
    assert acme(order=ORDER) == {"n": 1}


def test_conninfo_and_non_autocommit_pools(database_url: str, scope: str) -> None:
    runs = []

    def charge(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order)
        return {"n": len(runs)}

    # A conninfo: one connection per thread, opened again after it broke.
    layer = IdemKeysPersistenceLayer(scope=scope, conninfo=database_url)
    own = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge", persistence_store=layer)
    assert own(order=ORDER) == {"n": 1}
    layer._db._local.conn.close()
    assert own(order=ORDER) == {"n": 1}

    # A pool whose connections are not autocommit: each call in a transaction of its own.
    with ConnectionPool(database_url, min_size=1, max_size=2) as plain:
        pooled = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                     persistence_store=IdemKeysPersistenceLayer(scope=scope, pool=plain))
        assert pooled(order=ORDER) == {"n": 1}
        assert pooled(order={"order_id": "o-2"}) == {"n": 2}
        assert pooled(order={"order_id": "o-2"}) == {"n": 2}
