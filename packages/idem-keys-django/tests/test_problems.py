"""Problem bodies: the same fields, in the same order, the same bytes, in every package (docs/integrations.md)."""
import json

import pytest

from idem_keys_django import problems

ALL = [(problems.KEY_MISSING, 400, "key-missing", None), (problems.KEY_MALFORMED, 400, "key-malformed", None),
       (problems.BODY_UNREADABLE, 400, "body-unreadable", None),
       (problems.BODY_TOO_LARGE, 413, "body-too-large", None),
       (problems.in_progress(7), 409, "request-in-progress", 7), (problems.LEASE_LOST, 409, "lease-lost", 1),
       (problems.KEY_REUSED, 422, "key-reused", None), (problems.SCOPE_MISSING, 500, "scope-missing", None),
       (problems.STORE_FAILED, 500, "store-failed", None),
       (problems.STORE_UNAVAILABLE, 503, "store-unavailable", 1),
       (problems.COMMIT_FAILED, 503, "commit-failed", 1),
       (problems.COMMIT_UNKNOWN, 503, "commit-unknown", 1)]
TITLES = {400: "Bad Request", 409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content",
          500: "Internal Server Error", 503: "Service Unavailable"}


@pytest.mark.parametrize("problem,status,code,retry_after", ALL)
def test_body_and_headers(problem, status, code, retry_after):
    body = json.loads(problem.body())
    assert list(body) == ["type", "title", "status", "detail", "code"]
    assert body["type"] == "about:blank" and body["title"] == TITLES[status]
    assert body["status"] == status and body["code"] == code and body["detail"]
    response = problem.response()
    assert response.status_code == status and response.content == problem.body()
    assert response["Content-Type"] == "application/problem+json"
    assert response["Content-Length"] == str(len(problem.body()))
    assert response.get("Retry-After") == (None if retry_after is None else str(retry_after))


@pytest.mark.parametrize("server_says,client_waits", [(None, 1), (0, 1), (1, 1), (42, 42)])
def test_in_progress_waits_at_least_a_second(server_says, client_waits):
    assert problems.in_progress(server_says).retry_after == client_waits


def test_the_bytes_are_compact_json():
    """The same bytes as the Go, ASGI and Node packages write."""
    assert problems.KEY_REUSED.body() == (b'{"type":"about:blank","title":"Unprocessable Content","status":422,'
                                          b'"detail":"this Idempotency-Key was used with another request",'
                                          b'"code":"key-reused"}')
    assert problems.BODY_UNREADABLE.body() == (b'{"type":"about:blank","title":"Bad Request","status":400,'
                                               b'"detail":"the request body could not be read",'
                                               b'"code":"body-unreadable"}')


def test_commit_failed_bytes():
    """Transactional mode's failed COMMIT, byte for byte as the other packages write it."""
    assert problems.COMMIT_FAILED.body() == (b'{"type":"about:blank","title":"Service Unavailable","status":503,'
                                             b'"detail":"the request\'s changes could not be committed: nothing was '
                                             b'done, retry with the same Idempotency-Key","code":"commit-failed"}')


def test_commit_unknown_bytes():
    """Transactional mode's COMMIT whose answer was lost, byte for byte as the other packages write it."""
    assert problems.COMMIT_UNKNOWN.body() == (b'{"type":"about:blank","title":"Service Unavailable","status":503,'
                                              b'"detail":"the request\'s changes may or may not have been '
                                              b'committed: retry with the same Idempotency-Key to learn which",'
                                              b'"code":"commit-unknown"}')
