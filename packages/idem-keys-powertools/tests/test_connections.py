"""The layer's statements on connections that change under it: lost, reset, shared, in another encoding."""
from __future__ import annotations

from typing import Any

import psycopg
import pytest
from aws_lambda_powertools.utilities.idempotency import idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyPersistenceLayerError
from conftest import lookup
from psycopg_pool import ConnectionPool

from idem_keys_powertools import IdemKeysPersistenceLayer

ORDER = {"order_id": "o-1", "amount": 1000}


def counting() -> tuple[list[dict[str, Any]], Any]:
    runs: list[dict[str, Any]] = []

    def charge(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order)
        return {"n": len(runs)}

    return runs, charge


def terminate(database_url: str, pid: int) -> None:
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def test_a_lost_connection_fails_one_call_and_is_replaced(database_url: str, scope: str) -> None:
    runs, charge = counting()
    layer = IdemKeysPersistenceLayer(scope=scope, conninfo=database_url)
    once = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge", persistence_store=layer)
    assert once(order=ORDER) == {"n": 1}
    terminate(database_url, layer._db._local.conn.info.backend_pid)
    with pytest.raises(IdempotencyPersistenceLayerError) as failed:
        once(order=ORDER)
    assert isinstance(failed.value.__cause__, psycopg.OperationalError)
    assert once(order=ORDER) == {"n": 1}  # a new connection, the statements prepared again
    assert len(runs) == 1


def test_a_pool_replaces_a_lost_connection(database_url: str, scope: str) -> None:
    runs, charge = counting()
    with ConnectionPool(database_url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        once = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                   persistence_store=IdemKeysPersistenceLayer(scope=scope, pool=pool))
        assert once(order=ORDER) == {"n": 1}
        with pool.connection() as conn:
            pid = conn.info.backend_pid
        terminate(database_url, pid)
        with pytest.raises(IdempotencyPersistenceLayerError):
            once(order=ORDER)
        assert once(order=ORDER) == {"n": 1}
    assert len(runs) == 1


@pytest.mark.parametrize("autocommit", [True, False])
def test_statements_are_prepared_again_after_discard_all(database_url: str, scope: str, autocommit: bool) -> None:
    """A pool whose reset runs DISCARD ALL drops the prepared statements between two calls: with autocommit
    connections, and with connections where each call is a transaction of its own."""
    runs, charge = counting()

    def discard(conn: psycopg.Connection[Any]) -> None:
        conn.autocommit = True  # DISCARD ALL cannot run inside a transaction block
        conn.execute("DISCARD ALL")
        conn.autocommit = autocommit

    with ConnectionPool(database_url, min_size=1, max_size=1, kwargs={"autocommit": autocommit},
                        reset=discard) as pool:
        once = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                   persistence_store=IdemKeysPersistenceLayer(scope=scope, pool=pool))
        for order_id in ("o-1", "o-1", "o-2", "o-2"):
            once(order={"order_id": order_id})
    assert len(runs) == 2


def test_layers_sharing_a_pool_share_its_prepared_statements(pool: ConnectionPool[Any], scope: str) -> None:
    for n in range(3):  # each layer finds the statements another one prepared on the same connections
        runs, charge = counting()
        once = idempotent_function(charge, data_keyword_argument="order", key_prefix="charge",
                                   persistence_store=IdemKeysPersistenceLayer(scope=f"{scope}-{n}", pool=pool))
        assert once(order=ORDER) == once(order=ORDER) == {"n": 1}


def test_text_goes_in_the_connections_encoding(database_url: str, pool: ConnectionPool[Any], scope: str) -> None:
    runs, charge = counting()
    latin1 = IdemKeysPersistenceLayer(scope=scope + "-é", conninfo=f"{database_url}?client_encoding=LATIN1")
    once = idempotent_function(charge, data_keyword_argument="order", key_prefix="café",
                               persistence_store=latin1)
    assert once(order=ORDER) == once(order=ORDER) == {"n": 1}
    # Read back in UTF-8: the same scope and key.
    assert lookup(pool, scope + "-é", latin1._get_hashed_idempotency_key(ORDER) or "")[0] == "replay"
