"""The IDEM_KEYS setting, read and checked in one place: by the system checks (`manage.py check`, `runserver`,
`migrate`), and again when the middleware is made or a view decorated, which Django does at start-up. Every
mistake has a check id; `load` raises ImproperlyConfigured with all of them."""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, NamedTuple, TypeAlias

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string
from idem_keys_core import options as check
from idem_keys_core.answers import DEFAULT_STORED_HEADERS
from idem_keys_core.options import Log

SETTING = "IDEM_KEYS"
ScopeFunction: TypeAlias = Callable[[Any], "str | None"]

# The shared vocabulary (idem_keys_core.options.VOCABULARY) in upper case, and two keys of this package's own: PATHS
# (which requests the middleware covers) and DATABASE (the alias: the other packages' pool).
DEFAULTS: Mapping[str, Any] = {
    "SCOPE": None,
    "PATHS": None,
    "METHODS": ("POST", "PATCH"),
    "REQUIRED": True,
    "LEASE": None,
    "WAIT": None,
    "RETENTION": None,
    "RETRYABLE_STATUSES": (429, 503),
    "STORED_HEADERS": DEFAULT_STORED_HEADERS,
    "OUTCOME_HEADER": None,
    "MAX_BODY_BYTES": 1 << 20,
    "DATABASE": "default",
    "TRANSACTIONAL": None,
    "LOGGER": None,
}
# Keys of earlier releases, refused with the key that took their place.
RENAMED: Mapping[str, str] = {"HEADER_ALLOW_LIST": "STORED_HEADERS"}


@dataclass(frozen=True)
class Options:
    """IDEM_KEYS, checked: what a middleware, a decorated view or a view class runs with."""

    scope: ScopeFunction
    paths: tuple[re.Pattern[str], ...] | None
    methods: frozenset[str]
    required: bool
    lease: float | None  # seconds, or None for the server's idem_keys.lease
    wait: float | None  # None: no waiting
    retention: float | None
    retryable_statuses: frozenset[int]
    stored_headers: Mapping[str, str] = field(repr=False)  # lower-case name -> the name as configured
    outcome_header: str | None
    max_body_bytes: int
    database: str
    transactional: bool  # None in the setting is resolved here: the alias' ATOMIC_REQUESTS
    log: Log = field(repr=False)


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
    for old in sorted(RENAMED.keys() & given.keys()):
        mistakes.append(Invalid("idem_keys.E013", f"{SETTING}['{old}'] is now {SETTING}['{RENAMED[old]}']",
                                f"rename the key to {RENAMED[old]}: it takes the same value"))
    unknown = sorted(set(given) - set(DEFAULTS) - set(RENAMED))
    if unknown:
        mistakes.append(Invalid("idem_keys.E001", f"{SETTING} has unknown keys: {', '.join(unknown)}",
                                f"the keys are {', '.join(DEFAULTS)}"))
    value = {**DEFAULTS, **given}

    def checked(check_id: str, name: str, read_value: Callable[[str, Any], Any], fallback: Any) -> Any:
        try:
            return read_value(f"{SETTING}['{name}']", value[name])
        except (TypeError, ValueError) as e:
            mistakes.append(Invalid(check_id, str(e)))
            return fallback

    scope = _scope(value["SCOPE"], mistakes)
    paths = _paths(value["PATHS"], mistakes)
    methods = checked("idem_keys.E004", "METHODS", check.methods, frozenset())
    required = checked("idem_keys.E005", "REQUIRED", check.flag, False)
    lease = checked("idem_keys.E006", "LEASE", check.seconds, None)
    wait = checked("idem_keys.E006", "WAIT", lambda n, v: check.seconds(n, v, allow_zero=True), None) or None
    retention = checked("idem_keys.E006", "RETENTION", check.seconds, None)
    retryable = checked("idem_keys.E007", "RETRYABLE_STATUSES", check.statuses, frozenset())
    stored = checked("idem_keys.E008", "STORED_HEADERS", check.stored_headers, {})
    outcome_header = checked("idem_keys.E009", "OUTCOME_HEADER", check.header_name, None)
    max_body = checked("idem_keys.E010", "MAX_BODY_BYTES", check.max_body_bytes, 0)
    database = _database(value["DATABASE"], mistakes)
    transactional = value["TRANSACTIONAL"]
    if transactional is not None and not isinstance(transactional, bool):
        mistakes.append(Invalid("idem_keys.E012", f"{SETTING}['TRANSACTIONAL'] must be None, True or False, not "
                                f"{transactional!r}", "None follows the database's ATOMIC_REQUESTS"))
    log = checked("idem_keys.E014", "LOGGER", lambda n, v: check.logger(n, v, "idem_keys_django"), None)
    if mistakes or scope is None or database is None:
        return None, mistakes
    if transactional is None:
        transactional = bool(settings.DATABASES[database].get("ATOMIC_REQUESTS", False))
    return Options(scope=scope, paths=paths, methods=methods, required=required, lease=lease, wait=wait,
                   retention=retention, retryable_statuses=retryable, stored_headers=stored,
                   outcome_header=outcome_header, max_body_bytes=max_body, database=database,
                   transactional=transactional, log=log), []


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
    # By name: django-stubs types this module from its 6.1 line only, and both ends are type-checked.
    if not import_module("django.db.backends.postgresql.psycopg_any").is_psycopg3:
        mistakes.append(Invalid("idem_keys.E011", "idem-keys-django needs psycopg 3; Django is using psycopg2",
                                "pip install 'psycopg[binary]' (or psycopg's C build)"))
        return None
    return value
