"""Every problem of contract/problems.json as the middleware sends it: its status, its bytes, Content-Type,
Content-Length and Retry-After. The behaviour tests make each one it can through a request (their expect_problem
checks the same); this covers the table, body-unreadable included, which ASGI never sends: a client that
disconnects while sending its body gets no answer at all."""
import pytest

import contract
from idem_keys_asgi import options, respond
from idem_keys_core import problems

PROBLEMS = contract.load("problems")


async def sent(problem):
    messages = []

    async def send(message):
        messages.append(message)
    settings = options.read(pool=object(), scope=lambda scope: "t", lease=None, wait=None, retention=None,
                            methods=("POST",), required=True, retryable_statuses=(429,), stored_headers=(),
                            outcome_header=None, logger=None, max_body_bytes=1, transactional=False)
    await respond.problem(settings, send, problem)
    start, body = messages
    return start["status"], dict(start["headers"]), body["body"]


@pytest.mark.anyio
@pytest.mark.parametrize("row", PROBLEMS["problems"], ids=[r["code"] for r in PROBLEMS["problems"]])
async def test_each_problem_as_sent(row):
    problem = problems.BY_CODE[row["code"]] if row["retry_after"] != "lease" else problems.in_progress(7)
    status, headers, body = await sent(problem)
    assert status == row["status"] and body == row["body"].encode()
    assert headers[b"content-type"] == PROBLEMS["content_type"].encode()
    assert headers[b"content-length"] == str(len(body)).encode()
    expected = {None: None, "lease": b"7"}.get(row["retry_after"], str(row["retry_after"]).encode())
    assert headers.get(b"retry-after") == expected
