"""What the middleware reads of an ASGI request: its Idempotency-Key fields, the body (whole: the fingerprint
covers it), the target as the client sent it, and whether the body is JSON."""
from __future__ import annotations

from idem_keys_core import Request, statements

from .asgi import Receive, Scope

# read_body's answer for a body over the limit (the rest is not read: the server discards it).
TOO_LARGE = b"\x00too large"


def key_fields(scope: Scope) -> list[bytes]:
    """Every Idempotency-Key field, as sent."""
    return [value for name, value in scope["headers"] if name.lower() == b"idempotency-key"]


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body. None if the client disconnected first, TOO_LARGE if it is longer than limit."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        if message["type"] == "http.request":
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > limit:
                return TOO_LARGE
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def fingerprinted(scope: Scope, body: bytes) -> Request:
    """What the fingerprint covers: the method, the target, the body, and whether it counts as JSON."""
    return Request(scope["method"], target(scope).decode("latin-1"), body, is_json(scope))


def target(scope: Scope) -> bytes:
    """Path and query as the client sent them: raw, not decoded, so /a%2Fb and /a/b stay two requests."""
    path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    query: bytes = scope.get("query_string", b"")
    return path + b"?" + query if query else path


def is_json(scope: Scope) -> bool:
    """The request's Content-Type and Content-Encoding, by idem_keys_core's rule (the last field of each)."""
    media = encoding = None
    for name, value in scope["headers"]:
        lowered = name.lower()
        if lowered == b"content-type":
            media = value.decode("latin-1")
        elif lowered == b"content-encoding":
            encoding = value.decode("latin-1")
    return statements.is_json(media, encoding)


def without_response_extensions(scope: Scope) -> Scope:
    """The scope without the server's http.response.* extensions (pathsend, zerocopysend, trailers, ...): each
    sends an answer some other way than http.response.body, which this middleware could not hold and store."""
    extensions = scope.get("extensions")
    if not extensions or not any(name.startswith("http.response.") for name in extensions):
        return scope
    return {**scope, "extensions": {name: value for name, value in extensions.items()
                                    if not name.startswith("http.response.")}}
