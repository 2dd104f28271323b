"""Problem bodies: the same fields, in the same order, in all three packages (docs/integrations.md)."""
import json

import pytest

from idem_keys_asgi import problems

ALL = [(problems.KEY_MISSING, 400, "key-missing", None), (problems.KEY_MALFORMED, 400, "key-malformed", None),
       (problems.BODY_TOO_LARGE, 413, "body-too-large", None),
       (problems.in_progress(7), 409, "request-in-progress", 7), (problems.LEASE_LOST, 409, "lease-lost", 1),
       (problems.KEY_REUSED, 422, "key-reused", None), (problems.SCOPE_MISSING, 500, "scope-missing", None),
       (problems.STORE_FAILED, 500, "store-failed", None),
       (problems.STORE_UNAVAILABLE, 503, "store-unavailable", 1),
       (problems.COMMIT_FAILED, 503, "commit-failed", 1),
       (problems.COMMIT_UNKNOWN, 503, "commit-unknown", 1)]
TITLES = {400: "Bad Request", 409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content", 500: "Internal Server Error",
          503: "Service Unavailable"}


@pytest.mark.parametrize("problem,status,code,retry_after", ALL)
def test_body_and_headers(problem, status, code, retry_after):
    body = json.loads(problem.body())
    assert list(body) == ["type", "title", "status", "detail", "code"]
    assert body["type"] == "about:blank" and body["title"] == TITLES[status]
    assert body["status"] == status and body["code"] == code and body["detail"]
    headers = dict(problem.headers(len(problem.body())))
    assert headers[b"content-type"] == b"application/problem+json"
    assert headers[b"content-length"] == str(len(problem.body())).encode()
    assert headers.get(b"retry-after") == (None if retry_after is None else str(retry_after).encode())


@pytest.mark.parametrize("server_says,client_waits", [(None, 1), (0, 1), (1, 1), (42, 42)])
def test_in_progress_waits_at_least_a_second(server_says, client_waits):
    assert problems.in_progress(server_says).retry_after == client_waits


def test_the_bytes_are_compact_json():
    """The same bytes as the Go and Node packages write."""
    assert problems.KEY_REUSED.body() == (b'{"type":"about:blank","title":"Unprocessable Content","status":422,'
                                          b'"detail":"this Idempotency-Key was used with another request",'
                                          b'"code":"key-reused"}')


def test_commit_failed_bytes():
    """Transactional mode's failed COMMIT, byte for byte as the Go and Node packages write it."""
    assert problems.COMMIT_FAILED.body() == (b'{"type":"about:blank","title":"Service Unavailable","status":503,'
                                             b'"detail":"the request\'s changes could not be committed: nothing was '
                                             b'done, retry with the same Idempotency-Key","code":"commit-failed"}')


def test_commit_unknown_bytes():
    """Transactional mode's COMMIT whose answer was lost, byte for byte as the other packages write it."""
    assert problems.COMMIT_UNKNOWN.body() == (b'{"type":"about:blank","title":"Service Unavailable","status":503,'
                                              b'"detail":"the request\'s changes may or may not have been '
                                              b'committed: retry with the same Idempotency-Key to learn which",'
                                              b'"code":"commit-unknown"}')
