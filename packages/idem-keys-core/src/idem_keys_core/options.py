"""The option vocabulary every middleware package takes (docs/integrations.md, "Options"), and the checks of each
option's value. Each check raises TypeError (the wrong kind of value) or ValueError (the right kind, out of
range) with a message that starts with the option's name as the package spells it (`lease`,
`IDEM_KEYS['LEASE']`), and returns the value in the form the statements take."""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, TypeAlias

from .answers import FRAMING_HEADERS

# In Python's case; Django's setting spells them in upper case. A package may take options of its own beside
# these (the pool, Django's PATHS and DATABASE), never another name for one of them.
VOCABULARY = ("scope", "lease", "wait", "retention", "methods", "required", "retryable_statuses", "stored_headers",
              "outcome_header", "max_body_bytes", "transactional", "logger")

Duration: TypeAlias = "int | float | timedelta"
Log: TypeAlias = "logging.Logger | logging.LoggerAdapter[Any]"

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name or method (RFC 9110 token)


def seconds(name: str, value: Any, *, allow_zero: bool = False) -> float | None:
    """A duration as seconds for make_interval: a number of seconds or a timedelta; None for the server's own
    setting. Interval strings ("30s", "2 min") are refused: their meaning was PostgreSQL's, not the package's."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise TypeError(f"{name} must be seconds (an int or a float) or a datetime.timedelta, not {value!r}")
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise ValueError(f"{name} must be {bound} seconds, not {value!r}")
    return number


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def methods(name: str, value: Any) -> frozenset[str]:
    """HTTP methods, in any case: upper-cased."""
    names = _names(name, value, "HTTP methods")
    return frozenset(m.upper() for m in names)


def statuses(name: str, value: Any) -> frozenset[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of HTTP statuses, not {value!r}")
    found = list(value)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in found):
        raise TypeError(f"{name} must be a list of HTTP statuses, not {found!r}")
    if not all(100 <= s <= 599 for s in found):
        raise ValueError(f"{name} must be a list of HTTP statuses (100 to 599), not {found!r}")
    return frozenset(found)


def stored_headers(name: str, value: Any) -> dict[str, str]:
    """Header names, matched in any case: lower-case name -> the name as given (stored under it)."""
    names = _names(name, value, "header names")
    stored = {n.lower(): n for n in names}
    if FRAMING_HEADERS & stored.keys():
        raise ValueError(f"{name} may not name Content-Length or Transfer-Encoding: they are computed anew for every "
                         "answer")
    return stored


def header_name(name: str, value: Any) -> str | None:
    """One header name, or None for none."""
    if value is None:
        return None
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise TypeError(f"{name} must be None or a header name, not {value!r}")
    return value


def max_body_bytes(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be a positive number of bytes, not {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive number of bytes, not {value!r}")
    return value


def logger(name: str, value: Any, default: str) -> Log:
    """A logging.Logger or LoggerAdapter, or a logger's name; None for `default`'s logger."""
    if value is None:
        return logging.getLogger(default)
    if isinstance(value, str):
        return logging.getLogger(value)
    if isinstance(value, (logging.Logger, logging.LoggerAdapter)):
        return value
    raise TypeError(f"{name} must be a logging.Logger, a LoggerAdapter or a logger's name, not {value!r}")


def _names(name: str, value: Any, what: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of {what}, not {value!r}")
    found = list(value)
    if not all(isinstance(n, str) and _TOKEN.fullmatch(n) for n in found):
        raise ValueError(f"{name} must be a list of {what}, not {found!r}")
    return found
