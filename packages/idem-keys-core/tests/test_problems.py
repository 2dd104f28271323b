"""Every problem of contract/problems.json: its bytes, status, title, Content-Type and Retry-After; and no problem
the contract does not know."""
import pytest

from contract import load
from idem_keys_core import problems

PROBLEMS = load("problems")
ROWS = PROBLEMS["problems"]


@pytest.mark.parametrize("row", ROWS, ids=[r["code"] for r in ROWS])
def test_each_problem_is_the_contracts(row):
    problem = problems.BY_CODE[row["code"]]
    assert problem.body() == row["body"].encode()
    assert (problem.status, problem.title, problem.detail) == (row["status"], row["title"], row["detail"])
    fields = dict(problem.header_fields())
    assert fields["Content-Type"] == PROBLEMS["content_type"]
    assert fields["Content-Length"] == str(len(row["body"].encode()))
    if row["retry_after"] == "lease":
        # The claim's own, at least a second.
        for server_says, client_waits in ((None, 1), (0, 1), (1, 1), (42, 42)):
            assert problems.in_progress(server_says).header_fields()[-1] == ("Retry-After", str(client_waits))
            assert problems.in_progress(server_says).body() == row["body"].encode()
    elif row["retry_after"] is None:
        assert "Retry-After" not in fields
    else:
        assert fields["Retry-After"] == str(row["retry_after"])


def test_the_table_has_every_code_and_no_other():
    assert set(problems.BY_CODE) == {r["code"] for r in ROWS}
