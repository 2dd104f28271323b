"""What is kept of an answer and what a replay repeats: the stored headers, joined as a replay sends them, and
never the framing, which the server computes for every answer."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_STORED_HEADERS = ("Content-Type", "Content-Language", "Content-Location", "Location", "ETag", "Link")
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})


def headers_to_store(fields: Iterable[tuple[str, str]], stored: Mapping[str, str]) -> dict[str, str]:
    """The answer's fields that `stored` names (lower-case name -> the name as configured), under the configured
    name; several fields of one name are joined with ", "."""
    kept: dict[str, str] = {}
    for name, value in fields:
        canonical = stored.get(name.lower())
        if canonical is not None:
            kept[canonical] = f"{kept[canonical]}, {value}" if canonical in kept else value
    return kept


def replay_fields(headers: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The stored headers a replay sends, without any framing header (its own Content-Length is added)."""
    return [(name, str(value)) for name, value in (headers or {}).items() if name.lower() not in FRAMING_HEADERS]
