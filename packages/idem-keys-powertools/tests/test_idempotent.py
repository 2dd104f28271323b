"""The released `@idempotent` and `@idempotent_function` decorators on IdemKeysPersistenceLayer: each case the
issue lists, on both editions (conftest.py)."""
from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from conftest import FakeContext, InThread, lookup
from psycopg_pool import ConnectionPool

from idem_keys_powertools import IdemKeysLeaseLostError, IdemKeysPersistenceLayer, lease_lost

ORDER = {"order_id": "o-1", "amount": 1000, "currency": "EUR"}


def test_first_call_runs_second_replays_without_running(layer: IdemKeysPersistenceLayer,
                                                         pool: ConnectionPool[Any], scope: str) -> None:
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"charge": "ch_1", "amount": event["amount"], "n": len(runs)}

    first = handler(ORDER, FakeContext())
    second = handler(ORDER, FakeContext(request_id="req-2"))
    assert first == second == {"charge": "ch_1", "amount": 1000, "n": 1}
    assert len(runs) == 1
    # What is stored: Powertools' own JSON text, byte for byte, and the record's attributes.
    outcome, body, headers, _ = lookup(pool, scope, layer._get_hashed_idempotency_key(ORDER) or "")
    assert outcome == "replay"
    assert bytes(body) == json.dumps(first, sort_keys=True).encode()
    assert set(headers) == {"expiration", "validation"}


def test_idempotent_function_runs_once(layer: IdemKeysPersistenceLayer) -> None:
    runs = []

    @idempotent_function(data_keyword_argument="order", persistence_store=layer,
                         config=IdempotencyConfig(event_key_jmespath="order_id"))
    def charge(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order)
        return {"charge": f"ch_{len(runs)}"}

    assert charge(order=ORDER) == {"charge": "ch_1"}
    assert charge(order=ORDER) == {"charge": "ch_1"}
    assert charge(order={**ORDER, "order_id": "o-2"}) == {"charge": "ch_2"}
    assert len(runs) == 2


def test_a_result_of_none_is_stored_and_replayed(layer: IdemKeysPersistenceLayer) -> None:
    runs = []

    @idempotent(persistence_store=layer)
    def handler(event: dict[str, Any], context: Any) -> None:
        runs.append(event)

    assert handler(ORDER, FakeContext()) is None
    assert handler(ORDER, FakeContext()) is None
    assert len(runs) == 1


def test_concurrent_call_raises_in_progress(layer: IdemKeysPersistenceLayer) -> None:
    started, go_on = threading.Event(), threading.Event()
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(context.aws_request_id)
        started.set()
        assert go_on.wait(10)
        return {"by": context.aws_request_id}

    first = InThread(lambda: handler(ORDER, FakeContext(request_id="A")))
    assert started.wait(10)
    with pytest.raises(IdempotencyAlreadyInProgressError):
        handler(ORDER, FakeContext(request_id="B"))
    go_on.set()
    assert first.join() == {"by": "A"}
    assert handler(ORDER, FakeContext(request_id="C")) == {"by": "A"}
    assert runs == ["A"]


def test_wait_gets_the_running_invocations_result(pool: ConnectionPool[Any], scope: str) -> None:
    """Not in Powertools' own layers (its users have asked for it): with `wait`, a duplicate waits instead of raising."""
    layer = IdemKeysPersistenceLayer(scope=scope, pool=pool, wait=timedelta(seconds=10))
    started = threading.Event()
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(context.aws_request_id)
        started.set()
        time.sleep(0.3)
        return {"by": context.aws_request_id}

    first = InThread(lambda: handler(ORDER, FakeContext(request_id="A")))
    assert started.wait(10)
    assert handler(ORDER, FakeContext(request_id="B")) == {"by": "A"}
    assert first.join() == {"by": "A"}
    assert runs == ["A"]


def test_other_payload_raises_validation_error(layer: IdemKeysPersistenceLayer) -> None:
    runs = []
    config = IdempotencyConfig(event_key_jmespath="order_id", payload_validation_jmespath="[amount, currency]")

    @idempotent(persistence_store=layer, config=config)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"charged": event["amount"]}

    assert handler(ORDER, FakeContext()) == {"charged": 1000}
    with pytest.raises(IdempotencyValidationError):
        handler({**ORDER, "amount": 2000}, FakeContext())
    # Outside the validated fields, the same payload: the stored result.
    assert handler({**ORDER, "note": "retry"}, FakeContext()) == {"charged": 1000}
    assert len(runs) == 1


def test_other_payload_while_in_progress_raises_validation_error(layer: IdemKeysPersistenceLayer) -> None:
    started, go_on = threading.Event(), threading.Event()
    config = IdempotencyConfig(event_key_jmespath="order_id", payload_validation_jmespath="amount")

    @idempotent(persistence_store=layer, config=config)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        started.set()
        assert go_on.wait(10)
        return {"charged": event["amount"]}

    first = InThread(lambda: handler(ORDER, FakeContext()))
    assert started.wait(10)
    try:
        with pytest.raises(IdempotencyValidationError):
            handler({**ORDER, "amount": 2000}, FakeContext())
    finally:
        go_on.set()
    assert first.join() == {"charged": 1000}


def test_record_past_its_expiry_runs_again(layer: IdemKeysPersistenceLayer) -> None:
    runs = []

    @idempotent(persistence_store=layer,
                config=IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=1))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"n": len(runs)}

    assert handler(ORDER, FakeContext()) == {"n": 1}
    assert handler(ORDER, FakeContext()) == {"n": 1}
    time.sleep(1.3)
    assert handler(ORDER, FakeContext()) == {"n": 2}
    assert handler(ORDER, FakeContext()) == {"n": 2}


def test_timed_out_invocation_is_taken_over_and_its_late_write_refused(
        layer: IdemKeysPersistenceLayer, pool: ConnectionPool[Any], scope: str) -> None:
    """A's Lambda times out (1 s left at the claim: its lease); B takes the key over and stores its result;
    A's late result is refused with 55000 and B's record stays."""
    runs = []

    @idempotent(persistence_store=layer, config=IdempotencyConfig(event_key_jmespath="order_id"))
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(context.aws_request_id)
        if context.aws_request_id == "A":
            # Within A's lease a duplicate is refused...
            with pytest.raises(IdempotencyAlreadyInProgressError):
                InThread(lambda: handler(ORDER, FakeContext(request_id="D"))).join()
            # ...past it (Lambda would have killed A here; this A lives on) B takes the key over.
            time.sleep(1.2)
            assert InThread(lambda: handler(ORDER, FakeContext(request_id="B"))).join() == {"by": "B"}
        return {"by": context.aws_request_id}

    with pytest.raises(IdempotencyPersistenceLayerError) as refused:
        handler(ORDER, FakeContext(remaining_ms=1000, request_id="A"))
    lost = lease_lost(refused.value)
    assert isinstance(lost, IdemKeysLeaseLostError)
    assert lost.sqlstate == "55000"
    assert isinstance(lost.__cause__, psycopg.Error) and lost.__cause__.sqlstate == "55000"
    assert runs == ["A", "B"]
    # The new owner's result stays, and is what every retry gets.
    assert handler(ORDER, FakeContext(request_id="C")) == {"by": "B"}
    assert runs == ["A", "B"]
    _, body, _, _ = lookup(pool, scope, layer._get_hashed_idempotency_key(ORDER) or "")
    assert json.loads(bytes(body)) == {"by": "B"}
