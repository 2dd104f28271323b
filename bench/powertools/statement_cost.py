"""Why the layer runs its statements through libpq (idem_keys_powertools/sql.py): one claim of a new key, and a
`SELECT 1`, through psycopg's `conn.execute(..., prepare=True)` and through `conn.pgconn.exec_prepared` as the
layer does, interleaved, one client; prints the best and the median of the runs in µs per call.

    bench/powertools/.venv/bin/python bench/powertools/statement_cost.py postgresql://postgres@127.0.0.1:PORT/postgres
(a database with idem_keys; run.sh's venv has psycopg).
"""
from __future__ import annotations

import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq

RUNS, CALLS = 8, 1000
CLAIM_PSYCOPG = """SELECT r.outcome, r.token, r.response_bytes, r.headers, r.retry_after
  FROM idem_claim(%s::text, %s::text, %s::bytea, lease => %s::bigint * interval '1 millisecond',
                  wait => %s::bigint * interval '1 millisecond') AS r"""
CLAIM_LIBPQ = CLAIM_PSYCOPG.replace("%s", "$%d") % (1, 2, 3, 4, 5)


def main() -> None:
    conn = psycopg.connect(sys.argv[1], autocommit=True, options="-c synchronous_commit=off")
    pgconn = conn.pgconn
    assert pgconn.prepare(b"claim", CLAIM_LIBPQ.encode()).status == pq.ExecStatus.COMMAND_OK
    assert pgconn.prepare(b"one", b"SELECT 1").status == pq.ExecStatus.COMMAND_OK
    scope = f"statement-cost-{uuid.uuid4().hex[:8]}"

    def claim_psycopg(i: int) -> None:
        conn.execute(CLAIM_PSYCOPG, (scope, f"p{i}", b"", 30000, None), prepare=True).fetchone()

    def claim_libpq(i: int) -> None:
        values: Any = [scope.encode(), f"l{i}".encode(), b"", b"30000", None]  # None: NULL, as libpq takes it
        result = pgconn.exec_prepared(b"claim", values, [0, 0, 1, 0, 0], 1)
        assert result.status == pq.ExecStatus.TUPLES_OK and result.get_value(0, 0) == b"claimed"

    def one_psycopg(i: int) -> None:
        conn.execute("SELECT 1", prepare=True).fetchone()

    def one_libpq(i: int) -> None:
        pgconn.exec_prepared(b"one", [], None, 1).get_value(0, 0)

    cases: dict[str, Callable[[int], None]] = {
        "claim, psycopg execute": claim_psycopg, "claim, libpq exec_prepared": claim_libpq,
        "SELECT 1, psycopg execute": one_psycopg, "SELECT 1, libpq exec_prepared": one_libpq,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for run in range(RUNS):
        for name, call in cases.items():
            start = time.perf_counter()
            for i in range(CALLS):
                call(run * CALLS + i)
            times[name].append((time.perf_counter() - start) / CALLS * 1e6)
    for name, values in times.items():
        print(f"{name:32} best {min(values):6.1f} µs, median {statistics.median(values):6.1f} µs")


if __name__ == "__main__":
    main()
