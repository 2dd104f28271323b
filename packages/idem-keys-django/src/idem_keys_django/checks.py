"""Django system checks for IDEM_KEYS (`manage.py check`; runserver and migrate run them too): every mistake with
its id, idem_keys.E001 to E014, and W001. With `--database`, also whether the database has idem_keys."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import Error as DatabaseError
from django.db import connections

from . import conf


@register("idem_keys")
def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    options, mistakes = conf.read()
    found: list[CheckMessage] = [Error(m.msg, hint=m.hint, id=m.id) for m in mistakes]
    found += [Warning(w.msg, hint=w.hint, id=w.id) for w in conf.warnings()]
    return found


@register(Tags.database)
def check_database(app_configs: Sequence[Any] | None = None, databases: Iterable[str] | None = None,
                   **kwargs: Any) -> list[CheckMessage]:
    options, _ = conf.read()
    if options is None or options.database not in (databases or ()):
        return []
    try:
        with connections[options.database].cursor() as cursor:
            cursor.execute("SELECT count(DISTINCT proname) FROM pg_catalog.pg_proc WHERE proname IN "
                           "('idem_claim', 'idem_finish', 'idem_release') AND pg_catalog.pg_function_is_visible(oid)")
            row = cursor.fetchone()
    except DatabaseError as e:
        return [Error(f"database {options.database!r} could not be checked: {e}", id="idem_keys.E100")]
    if not row or row[0] != 3:
        return [Error(f"database {options.database!r} has no idem_claim, idem_finish and idem_release on its "
                      "search_path", hint="CREATE EXTENSION idem_keys, or install the portable edition",
                      id="idem_keys.E101")]
    return []
