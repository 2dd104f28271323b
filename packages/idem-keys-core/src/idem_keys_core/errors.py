"""Reading a database error the packages act on, whoever raised it: psycopg's own error (idem-keys-asgi), or
Django's, which wraps psycopg's as its __cause__. Read by attribute, so this package needs no driver."""
from __future__ import annotations

from . import sql


def sqlstate_of(error: BaseException) -> str | None:
    """The error's SQLSTATE; None when the server sent none (the connection was lost or closed)."""
    for e in (error, error.__cause__):
        code = getattr(e, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


def severity_of(error: BaseException) -> str | None:
    """The error's severity (ERROR, FATAL, PANIC) as the server wrote it, before translation (PostgreSQL 9.6 and
    later); the translated one only from an older server, where lc_messages may spell it otherwise."""
    for e in (error, error.__cause__):
        diag = getattr(e, "diag", None)
        if diag is not None:
            value = getattr(diag, "severity_nonlocalized", None) or getattr(diag, "severity", None)
            if isinstance(value, str):
                return value
    return None


def commit_outcome_unknown(error: BaseException) -> bool:
    """Whether a failed COMMIT may have committed all the same. An error the server sent proves a rollback,
    except class 08 (connection exception), 57P01-57P03 (the server shut the session down: its answer to the
    COMMIT is not the COMMIT's outcome), and a PANIC: a failure inside the commit's critical section (a WAL flush
    that failed, "cannot abort transaction ..., it was already committed"), where the commit may be durable
    already. No SQLSTATE means no answer: the connection was lost or closed while the COMMIT ran."""
    code = sqlstate_of(error)
    if code is None or code.startswith("08") or code in sql.SESSION_SHUT_DOWN:
        return True
    return severity_of(error) == "PANIC"


def lease_lost(error: BaseException) -> bool:
    """Whether idem_finish refused the answer because another request took the key over (the fencing token)."""
    return sqlstate_of(error) == sql.LEASE_LOST
