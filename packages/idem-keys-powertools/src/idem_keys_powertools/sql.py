"""The four SQL calls the layer makes, bind parameters only, and where their connections come from. Each call
is one statement that commits on its own (two-step mode, docs/api.md): a claim must be visible to every
duplicate before the function runs, and a result durable before the function returns it.

The statements run through psycopg's libpq interface (`conn.pgconn`): each is prepared once per connection
under its own name, then every call is one Bind/Execute with the parameters encoded here and the few result
fields decoded here (binary format). Against `conn.execute(..., prepare=True)` on the same server, one client,
a claim of a new key took 79 µs instead of 146 µs (best of 8 runs of 1000; `SELECT 1`: 22 µs instead of 34;
`bench/powertools/statement_cost.py`): psycopg's cursor, adapters and row loading cost about as much as the
claim itself. psycopg still makes, pools, locks and closes the connections.
"""
from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq
from psycopg.errors import error_from_result

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

TEXT, BINARY = 0, 1


@dataclass(frozen=True, slots=True)
class Statement:
    name: bytes  # the prepared statement's name on each connection; versioned, should the text change
    text: bytes
    formats: Sequence[int]  # per parameter: text, except the request's bytes


# The functions in FROM: each is called exactly once per statement, where `(f(...)).a, (f(...)).b` may call a
# STABLE one once per field. Fields by name, never `*`: a newer idem_result may grow columns. The bytea
# overload of idem_claim fingerprints the bytes it is given: Powertools' payload hash (see layer.py). Leases
# and retentions travel as whole milliseconds.
CLAIM = Statement(
    b"idem_keys_powertools_claim_1",
    b"SELECT r.outcome, r.token, r.response_bytes, r.headers, r.retry_after"
    b"  FROM idem_claim($1::text, $2::text, $3::bytea, lease => $4::bigint * interval '1 millisecond',"
    b"                  wait => $5::bigint * interval '1 millisecond') AS r",
    (TEXT, TEXT, BINARY, TEXT, TEXT))
# status 200: idem_keys stores an HTTP-like status; Powertools has one kind of finished record (COMPLETED).
# The response is Powertools' own JSON text as bytes: a replay gets it back exactly (jsonb would respace it).
FINISH = Statement(
    b"idem_keys_powertools_finish_1",
    b"SELECT idem_finish($1::text, $2::text, $3::bigint, 200, $4::bytea, headers => $5::jsonb,"
    b"                   retention => $6::bigint * interval '1 millisecond')",
    (TEXT, TEXT, TEXT, BINARY, TEXT, TEXT))
RELEASE = Statement(
    b"idem_keys_powertools_release_1",
    b"SELECT idem_release($1::text, $2::text, $3::bigint)",
    (TEXT, TEXT, TEXT))
LOOKUP = Statement(
    b"idem_keys_powertools_lookup_1",
    b"SELECT r.outcome, r.response_bytes, r.headers, r.retry_after FROM idem_lookup($1::text, $2::text) AS r",
    (TEXT, TEXT))
# invalid_sql_statement_name: the connection lost its prepared statements (a pool's reset ran DISCARD ALL).
_NOT_PREPARED = b"26000"
# duplicate_prepared_statement: prepared already, by a layer of another process's making (the names are
# versioned with their text, so it is the same statement).
_PREPARED_ALREADY = b"42P05"

# The statements each live connection has prepared, for every layer of the process (layers may share a pool);
# a connection's entry goes with it.
_prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], set[bytes]] = weakref.WeakKeyDictionary()
_prepared_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Answer:
    """The fields of an idem_result the layer reads. `outcome` is None when idem_lookup knows no such key."""
    outcome: str | None
    token: int | None
    response: bytes | None
    headers: dict[str, Any] | None
    retry_after: int | None


def _int(value: bytes | None) -> int | None:
    return None if value is None else int.from_bytes(value, "big", signed=True)


def _jsonb(value: bytes | None) -> Any:
    # jsonb's binary format: a version byte (1), then the JSON text.
    return None if value is None else json.loads(value[1:])


def _millis(milliseconds: int | None) -> str | None:
    return None if milliseconds is None else str(milliseconds)


def _encode(params: Sequence[str | bytes | None], encoding: str) -> list[bytes | None]:
    return [p.encode(encoding) if isinstance(p, str) else p for p in params]


class Connections:
    """Connections for the layer's statements: from a psycopg_pool.ConnectionPool (a connection per call), or
    from a conninfo (one connection per thread, opened on first use and again after it broke: what a Lambda
    function, one invocation at a time, wants across warm invocations)."""

    def __init__(self, pool: ConnectionPool[Any] | None, conninfo: str | None) -> None:
        if (pool is None) == (conninfo is None):
            raise ValueError("give exactly one of pool (a psycopg_pool.ConnectionPool) and conninfo")
        self._pool = pool
        self._conninfo = conninfo
        self._local = threading.local()

    def run(self, statement: Statement, params: Sequence[str | bytes | None]) -> pq.abc.PGresult:
        """One statement, committed on its own; its result, in binary format. Text goes in the connection's
        client encoding; bytes as they are."""
        pool = self._pool
        if pool is None:
            return self._run_on(self._own_connection(), statement, params)
        # getconn/putconn rather than pool.connection(): the same, less two generator frames per call.
        conn = pool.getconn()
        try:
            return self._run_on(conn, statement, params)
        finally:
            pool.putconn(conn)

    def _own_connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            assert self._conninfo is not None
            conn = psycopg.connect(self._conninfo, autocommit=True)
            self._local.conn = conn
        return conn

    def _run_on(self, conn: psycopg.Connection[Any], statement: Statement,
                params: Sequence[str | bytes | None]) -> pq.abc.PGresult:
        if conn.autocommit:
            with conn.lock:
                values = _encode(params, conn.info.encoding)
                self._prepare(conn, statement)
                return self._execute(conn, statement, values, retry=True)
        # A pool of non-autocommit connections: a transaction of its own (BEGIN and COMMIT cost two round
        # trips more; prefer kwargs={"autocommit": True}). transaction() takes the lock itself, for BEGIN and
        # COMMIT; a statement is prepared outside it, where a missing one cannot abort the transaction. A
        # statement lost to DISCARD ALL aborts that transaction instead: it rolls back, and the call runs once
        # more on a freshly prepared statement.
        with conn.lock:
            values = _encode(params, conn.info.encoding)
        try:
            return self._in_transaction(conn, statement, values)
        except psycopg.errors.InvalidSqlStatementName:
            with _prepared_lock:
                _prepared.pop(conn, None)
            return self._in_transaction(conn, statement, values)

    def _in_transaction(self, conn: psycopg.Connection[Any], statement: Statement,
                        values: list[bytes | None]) -> pq.abc.PGresult:
        with conn.lock:
            self._prepare(conn, statement)
        with conn.transaction():
            with conn.lock:
                return self._execute(conn, statement, values, retry=False)

    @staticmethod
    def _prepare(conn: psycopg.Connection[Any], statement: Statement) -> None:
        with _prepared_lock:
            done = _prepared.get(conn)
            if done is not None and statement.name in done:
                return
        result = conn.pgconn.prepare(statement.name, statement.text)
        if result.error_field(pq.DiagnosticField.SQLSTATE) != _PREPARED_ALREADY:
            Connections._check(conn, result, pq.ExecStatus.COMMAND_OK)
        with _prepared_lock:
            _prepared.setdefault(conn, set()).add(statement.name)

    @staticmethod
    def _execute(conn: psycopg.Connection[Any], statement: Statement, params: list[bytes | None],
                 retry: bool) -> pq.abc.PGresult:
        values: Any = params  # libpq takes None for NULL; psycopg's stub says Buffer only
        result = conn.pgconn.exec_prepared(statement.name, values, statement.formats, BINARY)
        if (retry and result.status == pq.ExecStatus.FATAL_ERROR
                and result.error_field(pq.DiagnosticField.SQLSTATE) == _NOT_PREPARED):
            with _prepared_lock:
                _prepared.pop(conn, None)
            Connections._prepare(conn, statement)
            result = conn.pgconn.exec_prepared(statement.name, values, statement.formats, BINARY)
        Connections._check(conn, result, pq.ExecStatus.TUPLES_OK)
        return result

    @staticmethod
    def _check(conn: psycopg.Connection[Any], result: pq.abc.PGresult, expected: int) -> None:
        if result.status == expected:
            return
        if conn.pgconn.status == pq.ConnStatus.BAD:
            # The pool (transaction status UNKNOWN) or _connection (broken) replaces the connection.
            raise psycopg.OperationalError(result.get_error_message() or "the connection to the server was lost")
        raise error_from_result(result)

    # --- the four calls --------------------------------------------------------------------------------------

    def claim(self, scope: str, key: str, request: bytes, lease_ms: int, wait_ms: int | None) -> Answer:
        result = self.run(CLAIM, (scope, key, request, _millis(lease_ms), _millis(wait_ms)))
        outcome, token, response, headers, retry_after = (result.get_value(0, c) for c in range(5))
        return Answer(None if outcome is None else outcome.decode(), _int(token), response, _jsonb(headers),
                      _int(retry_after))

    def finish(self, scope: str, key: str, token: int, response: bytes, headers: dict[str, Any],
               retention_ms: int) -> None:
        self.run(FINISH, (scope, key, str(token), response, json.dumps(headers), _millis(retention_ms)))

    def release(self, scope: str, key: str, token: int) -> bool:
        result = self.run(RELEASE, (scope, key, str(token)))
        return result.get_value(0, 0) == b"\x01"

    def lookup(self, scope: str, key: str) -> Answer:
        result = self.run(LOOKUP, (scope, key))
        outcome, response, headers, retry_after = (result.get_value(0, c) for c in range(4))
        return Answer(None if outcome is None else outcome.decode(), None, response, _jsonb(headers),
                      _int(retry_after))
