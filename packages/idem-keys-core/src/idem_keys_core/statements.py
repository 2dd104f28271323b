"""What the middlewares send and read, without sending it: the fingerprint's request, the claim's statements (the
JSON form first, then the bytes form), the finish and the release, and the rows they answer. The framework
packages run them on their own connections (psycopg's async pool, Django's connection)."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import sql


class Statement(NamedTuple):
    sql: str
    params: tuple[Any, ...]


@dataclass(frozen=True)
class Request:
    """What the fingerprint covers: the method, the target (path and query as the client sent them, as latin-1
    text, which keeps every byte), the body, and whether the body counts by its canonical JSON."""
    method: str
    target: str
    body: bytes
    is_json: bool

    def as_bytes(self) -> bytes:
        return self.method.encode("ascii") + b" " + self.target.encode("latin-1") + b"\n" + self.body


def is_json(content_type: str | None, content_encoding: str | None) -> bool:
    """A JSON media type (application/json, application/*+json) on a body that is not compressed (no
    Content-Encoding, or identity): a compressed JSON body counts by its bytes, in every middleware."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    encoding = (content_encoding or "").strip().lower() or "identity"
    json_type = media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
    return json_type and encoding == "identity"


def json_text(body: bytes) -> str | None:
    """The body as text for ::jsonb, or None when PostgreSQL could not take it as text at all (invalid UTF-8, or
    a NUL byte, which psycopg refuses before sending) or could only fail as JSON (an empty body): the bytes form
    fingerprints those, without a round trip that would only fail."""
    if not body or b"\x00" in body:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def claim_statements(scope: str, key: str, request: Request, lease: float | None,
                     wait: float | None) -> list[Statement]:
    """The claims to try, in order: the JSON fingerprint when the body is JSON the server may read, then the bytes
    one. A later one runs only when the one before was refused as JSON (`refused_as_json`)."""
    by_bytes = Statement(sql.CLAIM_BYTES, (scope, key, request.as_bytes(), lease, wait))
    text = json_text(request.body) if request.is_json else None
    if text is None:
        return [by_bytes]
    return [Statement(sql.CLAIM_JSON, (scope, key, request.method, request.target, text, lease, wait)), by_bytes]


def refused_as_json(sqlstate: str | None) -> bool:
    """Whether a claim failed because jsonb could not read the body: the bytes form goes next."""
    return sqlstate in sql.NOT_JSONB


@dataclass(frozen=True)
class Claim:
    outcome: str  # claimed, recovered, replay, in_progress or mismatch
    token: int | None
    status_code: int | None
    response: bytes | None
    headers: Mapping[str, Any] | None
    retry_after: int | None

    @property
    def runs(self) -> bool:
        """Whether the handler runs under this claim (a new key, or one recovered from a dead owner)."""
        return self.outcome in ("claimed", "recovered") and self.token is not None


def claim_from_row(row: Sequence[Any] | None) -> Claim:
    if row is None:  # a SELECT of one function call always returns one row
        raise RuntimeError("idem_claim returned no row")
    outcome, token, status_code, response, headers, retry_after = row
    if isinstance(headers, str):  # jsonb as text, where the driver does not decode it (Django's)
        headers = json.loads(headers)
    return Claim(outcome, token, status_code, None if response is None else bytes(response), headers, retry_after)


def finish_statement(scope: str, key: str, token: int, status: int, body: bytes, headers: Mapping[str, str],
                     retention: float | None) -> Statement:
    """The answer, stored: an empty body as NULL, the stored headers as a JSON object."""
    return Statement(sql.FINISH, (scope, key, token, status, body or None, json.dumps(headers), retention))


def release_statement(scope: str, key: str, token: int) -> Statement:
    return Statement(sql.RELEASE, (scope, key, token))


def released_from_row(row: Sequence[Any] | None) -> bool:
    """False when the token no longer owns the key: another request took it over, nothing to give back."""
    return bool(row and row[0])
