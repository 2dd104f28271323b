"""Powertools' idempotency on idem_keys (IdemKeysPersistenceLayer) against Powertools' own Redis layer
(RedisCachePersistenceLayer): the same @idempotent handler, the same machine, interleaved rounds, at matching
durability. Run by bench/powertools/run.sh, which starts and stops both servers.

Workloads: `new` (every call a new key: claim + store) and `replay` (every call a key already done: the stored
result, the function not run), at 1 and 8 caller threads, each thread with its own decorated handler, its own
persistence layer and its own connection (a pool of as many connections as threads / a redis.Redis client).
Durability: `relaxed` is PostgreSQL `synchronous_commit = off` beside Redis `appendfsync everysec`; `strict` is
`synchronous_commit = on` beside `appendfsync always` (both with `appendonly yes`, set by run.sh).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from aws_lambda_powertools.utilities.idempotency import BasePersistenceLayer, IdempotencyConfig, idempotent
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer
from psycopg_pool import ConnectionPool

from idem_keys_powertools import IdemKeysPersistenceLayer

# CachePersistenceLayer is the same class under its 4.0 name; the old name warns once per instance.
warnings.filterwarnings("ignore", message="RedisCachePersistenceLayer will be removed", category=DeprecationWarning)

LAYERS = ("idem_keys", "redis")
DURABILITY = {  # name: (PostgreSQL synchronous_commit, Redis appendfsync)
    "relaxed": ("off", "everysec"),
    "strict": ("on", "always"),
}
WORKLOADS = ("new", "replay")
# A payment the way a Lambda gets it, and the ~200-byte answer it gives (as bench/common.sh's).
ANSWER = {"id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "object": "charge", "amount": 1000, "currency": "eur",
          "paid": True, "status": "succeeded",
          "receipt_url": "https://pay.example.com/receipts/acct_1/ch_3MmlLrLkdIwHu7ix0snN0B15"}


class FakeContext:
    """What Powertools reads of a LambdaContext: 30 s left, as a Lambda at the start of an invocation."""
    function_name = "payments"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:payments"
    aws_request_id = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def event(order_id: str, amount: int = 1000) -> dict[str, Any]:
    return {"order_id": order_id, "amount": amount, "currency": "EUR", "customer": "cus_9s6XKzkNRiz8i3",
            "description": "Order 4711"}


@dataclass
class Servers:
    pg_url: str
    redis_port: int

    def set_durability(self, name: str) -> None:
        """Redis: appendfsync for every client at once. PostgreSQL: per connection (layer_factory)."""
        client = redis.Redis(host="127.0.0.1", port=self.redis_port)
        client.config_set("appendfsync", DURABILITY[name][1])
        client.close()


class Contender:
    """One layer kind at one durability with `threads` callers: a decorated handler per thread, and a count
    of the handler's runs (a replay must not run it)."""

    def __init__(self, servers: Servers, layer: str, durability: str, threads: int,
                 expires_after_seconds: int = 3600) -> None:
        self.runs = 0
        self._runs_lock = threading.Lock()
        self.started = threading.Event()  # for semantics(): a call that blocks until `go_on`
        self.go_on = threading.Event()
        self._pool: ConnectionPool[Any] | None = None
        self._clients: list[redis.Redis] = []
        scope = f"bench-{uuid.uuid4().hex[:8]}"
        stores: list[BasePersistenceLayer] = []
        if layer == "idem_keys":
            sync = DURABILITY[durability][0]
            self._pool = ConnectionPool(servers.pg_url, min_size=threads, max_size=threads, open=True,
                                        kwargs={"autocommit": True, "options": f"-c synchronous_commit={sync}"})
            self._pool.wait(timeout=30)
            stores = [IdemKeysPersistenceLayer(scope=scope, pool=self._pool) for _ in range(threads)]
        else:
            # Keys of their own per contender, as the scope does for idem_keys: the prefix is in the key.
            for _ in range(threads):
                client = redis.Redis(host="127.0.0.1", port=servers.redis_port, decode_responses=True)
                self._clients.append(client)
                stores.append(RedisCachePersistenceLayer(client=client))
        self.prefix = scope
        self.handlers = [self._decorate(store, expires_after_seconds) for store in stores]

    def _decorate(self, store: BasePersistenceLayer, expires_after_seconds: int) -> Callable[..., Any]:
        # No payload_validation_jmespath: Powertools 3.37.0's Redis layer drops the payload hash when it stores
        # the result, so with validation every replay of it raises IdempotencyValidationError (the same bug as
        # the TypeScript cache layer's, since fixed upstream). Without it, a replay
        # of another payload under the same key is the stored result, as it is for both layers here.
        config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=expires_after_seconds)

        @idempotent(persistence_store=store, config=config, key_prefix=self.prefix)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            with self._runs_lock:
                self.runs += 1
            if event.get("fail"):
                raise RuntimeError("declined")
            if event.get("block"):
                self.started.set()
                self.go_on.wait(10)
            return {**ANSWER, "order_id": event["order_id"]}

        return handler

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        for client in self._clients:
            client.close()


def drive(contender: Contender, events: Callable[[int, int], dict[str, Any]], seconds: float,
          check: Callable[[dict[str, Any], dict[str, Any]], None]) -> float:
    """Calls per second of all threads together, each calling its handler as fast as it can for `seconds`."""
    threads = len(contender.handlers)
    counts = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def caller(n: int) -> None:
        handler, context = contender.handlers[n], FakeContext()
        start.wait()
        i = 0
        try:
            while time.perf_counter() < stop_at[0]:
                e = events(n, i)
                check(e, handler(e, context))
                i += 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        counts[n] = i

    workers = [threading.Thread(target=caller, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    began = time.perf_counter()
    stop_at[0] = began + seconds
    start.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def expect_answer(e: dict[str, Any], result: dict[str, Any]) -> None:
    if result != {**ANSWER, "order_id": e["order_id"]}:
        raise AssertionError(f"wrong result for {e['order_id']}: {result!r}")


def measure(servers: Servers, layer: str, durability: str, workload: str, threads: int, seconds: float,
            warmup: float, replay_keys: int) -> float:
    contender = Contender(servers, layer, durability, threads)
    try:
        if workload == "new":
            serial = itertools.count()
            run_id = uuid.uuid4().hex[:8]

            def new_key(n: int, i: int) -> dict[str, Any]:
                return event(f"{run_id}-{next(serial)}")

            drive(contender, new_key, warmup, expect_answer)
            runs_before = contender.runs
            rate = drive(contender, new_key, seconds, expect_answer)
            if contender.runs - runs_before < rate * seconds * 0.5:
                raise AssertionError("new keys did not run the handler")
            return rate
        # Replays: keys done once beforehand, then asked again and again; the handler must not run.
        done = [event(f"done-{k}") for k in range(replay_keys)]
        handler, context = contender.handlers[0], FakeContext()
        for e in done:
            handler(e, context)

        def replay(n: int, i: int) -> dict[str, Any]:
            return done[(n * 7919 + i) % replay_keys]

        drive(contender, replay, warmup, expect_answer)
        runs_before = contender.runs
        rate = drive(contender, replay, seconds, expect_answer)
        if contender.runs != runs_before:
            raise AssertionError(f"{layer}: a replay ran the handler")
        return rate
    finally:
        contender.close()


def semantics(servers: Servers, layer: str) -> list[str]:
    """What the handler's callers see, step by step; both layers must give the same list (--smoke)."""
    contender = Contender(servers, layer, "relaxed", 1, expires_after_seconds=2)
    handler, context = contender.handlers[0], FakeContext()
    seen: list[str] = []

    def call(e: dict[str, Any]) -> str:
        try:
            result = handler(e, context)
            return f"ok {result['order_id']} runs={contender.runs}"
        except (IdempotencyAlreadyInProgressError, IdempotencyValidationError, RuntimeError) as error:
            return f"{type(error).__name__} runs={contender.runs}"

    try:
        seen.append("first: " + call(event("s-1")))
        seen.append("again: " + call(event("s-1")))
        seen.append("other amount: " + call(event("s-1", amount=5)))
        # In progress: a duplicate while the first call runs.
        blocked: list[str] = []
        first = threading.Thread(target=lambda: blocked.append(call({**event("s-2"), "block": True})))
        first.start()
        if not contender.started.wait(10):
            raise AssertionError(f"{layer}: the first call of s-2 did not start")
        seen.append("duplicate: " + call(event("s-2")))
        contender.go_on.set()
        first.join(timeout=20)
        seen.append("blocked first: " + blocked[0])
        seen.append("after: " + call(event("s-2")))
        # An exception gives the key back.
        seen.append("failing: " + call({**event("s-3"), "fail": True}))
        seen.append("retry: " + call(event("s-3")))
        # Past expires_after_seconds (2 s) the function runs again.
        time.sleep(3.1)
        seen.append("expired: " + call(event("s-1")))
    finally:
        contender.close()
    return seen


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg-url", required=True)
    parser.add_argument("--redis-port", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--threads", default="1,8")
    parser.add_argument("--replay-keys", type=int, default=200)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    servers = Servers(args.pg_url, args.redis_port)
    threads_list = [int(t) for t in args.threads.split(",")]

    if args.smoke:
        results = {layer: semantics(servers, layer) for layer in LAYERS}
        for line in results["idem_keys"]:
            print(f"  {line}")
        if results["idem_keys"] != results["redis"]:
            print("smoke: the layers differ:", file=sys.stderr)
            for a, b in zip(results["idem_keys"], results["redis"]):
                print(f"  idem_keys: {a}\n  redis:     {b}", file=sys.stderr)
            return 1
        print("smoke: both layers give the same results")

    rates: dict[tuple[str, str, str, int], list[float]] = {}
    for r in range(args.rounds):
        for durability in DURABILITY:
            servers.set_durability(durability)
            for workload in WORKLOADS:
                for threads in threads_list:
                    # Interleaved, and the order alternates from round to round and cell to cell.
                    flip = (r + threads + WORKLOADS.index(workload)) % 2
                    for layer in (LAYERS[::-1] if flip else LAYERS):
                        rate = measure(servers, layer, durability, workload, threads, args.seconds,
                                       args.warmup, args.replay_keys)
                        rates.setdefault((durability, workload, layer, threads), []).append(rate)
                        print(f"round {r + 1}: {durability:7} {workload:6} {threads} threads {layer:9} "
                              f"{rate:9.0f} calls/s", file=sys.stderr, flush=True)

    print()
    print("| durability (PostgreSQL / Redis) | workload | callers | idem_keys calls/s | Redis calls/s | idem_keys ÷ Redis |")
    print("|---|---|---|---|---|---|")
    for durability, (sync, fsync) in DURABILITY.items():
        for workload in WORKLOADS:
            for threads in threads_list:
                idem = statistics.median(rates[(durability, workload, "idem_keys", threads)])
                red = statistics.median(rates[(durability, workload, "redis", threads)])
                label = "new keys" if workload == "new" else "replays"
                print(f"| synchronous_commit={sync} / appendfsync {fsync} | {label} | {threads} | "
                      f"{idem:,.0f} | {red:,.0f} | {idem / red:.2f}× |")
    print()
    print(f"Median of {args.rounds} round(s) of {args.seconds:g} s per cell (after {args.warmup:g} s of warm-up), "
          "the two layers interleaved in each round.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
