"""The answers a middleware makes itself: application/problem+json (RFC 9457), the same fields in the same order
and the same bytes from every package (docs/integrations.md, "Problems"). Each framework package turns a Problem
into its own kind of response."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

CONTENT_TYPE = "application/problem+json"

# RFC 9110's reason phrases, written out: http.HTTPStatus says "Unprocessable Entity" for 422 before Python 3.13,
# and every package must agree whatever the runtime.
TITLES = {400: "Bad Request", 409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content",
          500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Problem:
    status: int
    code: str
    detail: str
    retry_after: int | None = None

    @property
    def title(self) -> str:
        return TITLES[self.status]

    def body(self) -> bytes:
        # Compact, as Go's encoding/json and JSON.stringify write it: the same bytes from every package.
        return json.dumps({"type": "about:blank", "title": self.title, "status": self.status,
                           "detail": self.detail, "code": self.code}, separators=(",", ":"),
                          ensure_ascii=False).encode()

    def header_fields(self) -> list[tuple[str, str]]:
        """The answer's header fields, Content-Length included."""
        fields = [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(self.body())))]
        if self.retry_after is not None:
            fields.append(("Retry-After", str(self.retry_after)))
        return fields


KEY_MISSING = Problem(400, "key-missing", "this request needs an Idempotency-Key header")
KEY_MALFORMED = Problem(400, "key-malformed", "the Idempotency-Key must be one field of 1 to 255 characters, bare or "
                        "as a quoted string")
# A body the server could not read (the client went away while sending it).
BODY_UNREADABLE = Problem(400, "body-unreadable", "the request body could not be read")
BODY_TOO_LARGE = Problem(413, "body-too-large", "the request body is larger than this server accepts; nothing was "
                         "claimed")
KEY_REUSED = Problem(422, "key-reused", "this Idempotency-Key was used with another request")
SCOPE_MISSING = Problem(500, "scope-missing", "the server could not tell whose request this is")
STORE_FAILED = Problem(500, "store-failed", "the answer could not be stored: retry later with the same Idempotency-Key")
STORE_UNAVAILABLE = Problem(503, "store-unavailable", "the idempotency store could not be reached: nothing was "
                            "done", retry_after=1)
COMMIT_FAILED = Problem(503, "commit-failed", "the request's changes could not be committed: nothing was done, retry "
                        "with the same Idempotency-Key", retry_after=1)
COMMIT_UNKNOWN = Problem(503, "commit-unknown", "the request's changes may or may not have been committed: retry "
                         "with the same Idempotency-Key to learn which", retry_after=1)
LEASE_LOST = Problem(409, "lease-lost", "this request ran past its claim and another request took the key over: "
                     "retry to get that one's answer", retry_after=1)


def in_progress(retry_after: int | None) -> Problem:
    """409 for a duplicate of a running request. The server's retry_after counts down to the end of the first
    attempt's lease; 0 or NULL would invite a tight loop, so a client waits at least a second."""
    return Problem(409, "request-in-progress", "a request with this Idempotency-Key is still running: retry after "
                   "Retry-After seconds", retry_after=max(1, retry_after or 0))


# Every problem by its code; request-in-progress with the shortest Retry-After (its own comes from the claim).
BY_CODE: Mapping[str, Problem] = {p.code: p for p in (
    KEY_MISSING, KEY_MALFORMED, BODY_UNREADABLE, in_progress(None), LEASE_LOST, BODY_TOO_LARGE, KEY_REUSED,
    SCOPE_MISSING, STORE_FAILED, STORE_UNAVAILABLE, COMMIT_FAILED, COMMIT_UNKNOWN)}
