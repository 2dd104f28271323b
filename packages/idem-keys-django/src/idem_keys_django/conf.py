"""The IDEM_KEYS setting, read and checked in one place: by the system checks (`manage.py check`, `runserver`,
`migrate`), and again when the middleware is made or a view decorated, which Django does at start-up. Every
mistake has a check id; `load` raises ImproperlyConfigured with all of them."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple, TypeAlias

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string

SETTING = "IDEM_KEYS"
# A duration as psycopg sends it (timedelta) or as PostgreSQL reads it ("30s", "5 minutes").
Interval: TypeAlias = timedelta | str
ScopeFunction: TypeAlias = Callable[[Any], "str | None"]

DEFAULT_STORED_HEADERS = ("Content-Type", "Content-Language", "Content-Location", "Location", "ETag", "Link")
# The framing of an answer is the server's to compute on every send, never something to replay.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP field name (RFC 9110 token)

DEFAULTS: Mapping[str, Any] = {
    "SCOPE": None,
    "PATHS": None,
    "METHODS": ("POST", "PATCH"),
    "REQUIRED": True,
    "LEASE": None,
    "WAIT": None,
    "RETENTION": None,
    "RETRYABLE_STATUSES": (429, 503),
    "HEADER_ALLOW_LIST": DEFAULT_STORED_HEADERS,
    "OUTCOME_HEADER": None,
    "MAX_BODY_BYTES": 1 << 20,
    "DATABASE": "default",
    "TRANSACTIONAL": None,
}


@dataclass(frozen=True)
class Options:
    """IDEM_KEYS, checked: what a middleware, a decorated view or a view class runs with."""

    scope: ScopeFunction
    paths: tuple[re.Pattern[str], ...] | None
    methods: frozenset[str]
    required: bool
    lease: Interval | None
    wait: Interval | None
    retention: Interval | None
    retryable_statuses: frozenset[int]
    stored_headers: Mapping[str, str] = field(repr=False)  # lower-case name -> the name as configured
    outcome_header: str | None
    max_body_bytes: int
    database: str
    transactional: bool  # None in the setting is resolved here: the alias' ATOMIC_REQUESTS


class Invalid(NamedTuple):
    """One mistake in the setting: a system check's id, message and hint."""

    id: str
    msg: str
    hint: str | None = None


def read(overrides: Mapping[str, Any] | None = None) -> tuple[Options | None, list[Invalid]]:
    """IDEM_KEYS with `overrides` (a decorator's or a view class' own, by the same names in any case) over it:
    the Options, or None and every mistake found."""
    raw = getattr(settings, SETTING, {})
    if not isinstance(raw, Mapping):
        return None, [Invalid("idem_keys.E001", f"{SETTING} must be a dict, not {type(raw).__name__}")]
    mistakes: list[Invalid] = []
    given = dict(raw)
    for name, value in (overrides or {}).items():
        given[name.upper()] = value
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        mistakes.append(Invalid("idem_keys.E001", f"{SETTING} has unknown keys: {', '.join(unknown)}",
                                f"the keys are {', '.join(DEFAULTS)}"))
    value = {**DEFAULTS, **given}

    scope = _scope(value["SCOPE"], mistakes)
    paths = _paths(value["PATHS"], mistakes)
    methods = _methods(value["METHODS"], mistakes)
    required = _flag("REQUIRED", "idem_keys.E005", value["REQUIRED"], mistakes)
    lease = _duration("LEASE", value["LEASE"], allow_zero=False, mistakes=mistakes)
    wait = _duration("WAIT", value["WAIT"], allow_zero=True, mistakes=mistakes) or None  # 0: do not wait
    retention = _duration("RETENTION", value["RETENTION"], allow_zero=False, mistakes=mistakes)
    retryable = _statuses(value["RETRYABLE_STATUSES"], mistakes)
    stored = _stored_headers(value["HEADER_ALLOW_LIST"], mistakes)
    outcome_header = _outcome_header(value["OUTCOME_HEADER"], mistakes)
    max_body = _max_body(value["MAX_BODY_BYTES"], mistakes)
    database = _database(value["DATABASE"], mistakes)
    transactional = value["TRANSACTIONAL"]
    if transactional is not None and not isinstance(transactional, bool):
        mistakes.append(Invalid("idem_keys.E012", f"{SETTING}['TRANSACTIONAL'] must be None, True or False, not "
                                f"{transactional!r}", "None follows the database's ATOMIC_REQUESTS"))
    if mistakes or scope is None or database is None:
        return None, mistakes
    if transactional is None:
        transactional = bool(settings.DATABASES[database].get("ATOMIC_REQUESTS", False))
    return Options(scope=scope, paths=paths, methods=methods, required=bool(required), lease=lease, wait=wait,
                   retention=retention, retryable_statuses=retryable, stored_headers=stored,
                   outcome_header=outcome_header, max_body_bytes=max_body, database=database,
                   transactional=transactional), []


def load(overrides: Mapping[str, Any] | None = None) -> Options:
    """The Options, or ImproperlyConfigured naming every mistake (with its check id)."""
    options, mistakes = read(overrides)
    if options is None:
        raise ImproperlyConfigured("; ".join(f"{m.id}: {m.msg}" for m in mistakes))
    return options


def warnings() -> list[Invalid]:
    """What is allowed but probably not meant."""
    raw = getattr(settings, SETTING, {})
    limit = raw.get("MAX_BODY_BYTES", DEFAULTS["MAX_BODY_BYTES"]) if isinstance(raw, Mapping) else None
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if isinstance(limit, int) and django_limit is not None and limit > django_limit:
        return [Invalid("idem_keys.W001", f"{SETTING}['MAX_BODY_BYTES'] ({limit}) is larger than "
                        f"DATA_UPLOAD_MAX_MEMORY_SIZE ({django_limit})",
                        "Django refuses the bodies in between first; they are answered 413 body-too-large")]
    return []


def _scope(value: Any, mistakes: list[Invalid]) -> ScopeFunction | None:
    # No default scope: one shared by every tenant would let one tenant's key answer another's request.
    hint = "a function of the request giving its tenant (from authentication), or its dotted path"
    if value is None:
        mistakes.append(Invalid("idem_keys.E002", f"{SETTING}['SCOPE'] is required", hint))
        return None
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as e:
            mistakes.append(Invalid("idem_keys.E002", f"{SETTING}['SCOPE'] cannot be imported: {e}", hint))
            return None
    if not callable(value):
        mistakes.append(Invalid("idem_keys.E002", f"{SETTING}['SCOPE'] is not callable: {value!r}", hint))
        return None
    scope: ScopeFunction = value
    return scope


def _paths(value: Any, mistakes: list[Invalid]) -> tuple[re.Pattern[str], ...] | None:
    if value is None:
        return None
    patterns = [value] if isinstance(value, str) else value
    compiled = []
    try:
        for pattern in patterns:
            compiled.append(re.compile(pattern))
    except (TypeError, re.error) as e:
        mistakes.append(Invalid("idem_keys.E003", f"{SETTING}['PATHS'] must be None or regular expressions "
                                f"(matched at the start of request.path_info): {e}"))
        return None
    return tuple(compiled)


def _methods(value: Any, mistakes: list[Invalid]) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(
            isinstance(m, str) and _TOKEN.fullmatch(m) for m in value):
        mistakes.append(Invalid("idem_keys.E004", f"{SETTING}['METHODS'] must be a list of HTTP methods, not "
                                f"{value!r}"))
        return frozenset()
    return frozenset(m.upper() for m in value)


def _flag(name: str, check_id: str, value: Any, mistakes: list[Invalid]) -> bool:
    if not isinstance(value, bool):
        mistakes.append(Invalid(check_id, f"{SETTING}['{name}'] must be True or False, not {value!r}"))
        return False
    return value


def _duration(name: str, value: Any, *, allow_zero: bool, mistakes: list[Invalid]) -> Interval | None:
    """A timedelta, a number of seconds, or a PostgreSQL interval string (PostgreSQL reads it: the database check
    of `manage.py check --database` tries each)."""
    check_id = "idem_keys.E006"
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            mistakes.append(Invalid(check_id, f"{SETTING}['{name}'] is an empty string"))
            return None
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta):
        mistakes.append(Invalid(check_id, f"{SETTING}['{name}'] must be a timedelta, seconds or a PostgreSQL "
                                f"interval string, not {value!r}"))
        return None
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        mistakes.append(Invalid(check_id, f"{SETTING}['{name}'] must be {'at least' if allow_zero else 'more than'} "
                                f"zero, not {value}"))
        return None
    return value


def _statuses(value: Any, mistakes: list[Invalid]) -> frozenset[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or not all(
            isinstance(s, int) and not isinstance(s, bool) and 100 <= s <= 599 for s in value):
        mistakes.append(Invalid("idem_keys.E007", f"{SETTING}['RETRYABLE_STATUSES'] must be a list of HTTP "
                                f"statuses, not {value!r}"))
        return frozenset()
    return frozenset(value)


def _stored_headers(value: Any, mistakes: list[Invalid]) -> dict[str, str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        mistakes.append(Invalid("idem_keys.E008", f"{SETTING}['HEADER_ALLOW_LIST'] must be a list of header "
                                f"names, not {value!r}"))
        return {}
    names = list(value)
    if not all(isinstance(n, str) and _TOKEN.fullmatch(n) for n in names):
        mistakes.append(Invalid("idem_keys.E008", f"{SETTING}['HEADER_ALLOW_LIST'] must be a list of header "
                                f"names, not {names!r}"))
        return {}
    stored = {name.lower(): name for name in names}
    if FRAMING_HEADERS & stored.keys():
        mistakes.append(Invalid("idem_keys.E008", f"{SETTING}['HEADER_ALLOW_LIST'] may not name Content-Length "
                                "or Transfer-Encoding", "they are computed anew for every answer"))
    return stored


def _outcome_header(value: Any, mistakes: list[Invalid]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        mistakes.append(Invalid("idem_keys.E009", f"{SETTING}['OUTCOME_HEADER'] must be None or a header name, not "
                                f"{value!r}"))
        return None
    return value


def _max_body(value: Any, mistakes: list[Invalid]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        mistakes.append(Invalid("idem_keys.E010", f"{SETTING}['MAX_BODY_BYTES'] must be a positive number of bytes, "
                                f"not {value!r}"))
        return 0
    return value


def _database(value: Any, mistakes: list[Invalid]) -> str | None:
    if not isinstance(value, str) or value not in settings.DATABASES:
        mistakes.append(Invalid("idem_keys.E011", f"{SETTING}['DATABASE'] must name an alias of DATABASES, not "
                                f"{value!r}"))
        return None
    vendor = connections[value].vendor  # no connection is made: the backend's class says it
    if vendor != "postgresql":
        mistakes.append(Invalid("idem_keys.E011", f"{SETTING}['DATABASE'] is {value!r}, a {vendor} database",
                                "idem_keys lives in PostgreSQL: django.db.backends.postgresql (or a backend built on "
                                "it), with psycopg 3"))
        return None
    from django.db.backends.postgresql.psycopg_any import is_psycopg3  # type: ignore[import-untyped]
    if not is_psycopg3:
        mistakes.append(Invalid("idem_keys.E011", "idem-keys-django needs psycopg 3; Django is using psycopg2",
                                "pip install 'psycopg[binary]' (or psycopg's C build)"))
        return None
    return value
