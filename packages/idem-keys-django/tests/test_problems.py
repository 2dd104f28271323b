"""Every problem of contract/problems.json as the package answers it: status, bytes, Content-Type,
Content-Length and Retry-After. The behaviour tests make each one through a request (conftest's expect_problem
checks the same there)."""
import pytest

from conftest import CONTRACT_PROBLEMS, expect_problem
from idem_keys_core import problems
from idem_keys_django.problems import respond

ROWS = CONTRACT_PROBLEMS["problems"]


@pytest.mark.parametrize("row", ROWS, ids=[r["code"] for r in ROWS])
def test_each_problem_as_answered(row):
    problem = problems.in_progress(7) if row["retry_after"] == "lease" else problems.BY_CODE[row["code"]]
    response = respond(problem)
    expect_problem(response, row["status"], row["code"])
    if row["retry_after"] == "lease":
        assert response["Retry-After"] == "7"
