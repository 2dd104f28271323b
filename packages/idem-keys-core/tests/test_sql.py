"""The statements are contract/sql.json's, and carry the parameters it names, in its order."""
import pytest

from contract import folded, load
from idem_keys_core import Request, sql, statements

SQL = load("sql")["statements"]
MINE = {"claim_json": sql.CLAIM_JSON, "claim_bytes": sql.CLAIM_BYTES, "finish": sql.FINISH, "release": sql.RELEASE}


@pytest.mark.parametrize("name", sorted(SQL))
def test_each_statement_is_the_contracts(name):
    assert " ".join(MINE[name].split()) == folded(SQL[name]["sql"])
    assert MINE[name].count("%s") == len(SQL[name]["params"])


def test_no_statement_beyond_the_contract():
    assert set(MINE) == set(SQL)


def test_the_parameters_in_the_contracts_order():
    json_request = Request("POST", "/pay?x=%41", b'{"a": 1}', is_json=True)
    by_json, by_bytes = statements.claim_statements("acme", "k1", json_request, 30.0, None)
    assert by_json == (sql.CLAIM_JSON, ("acme", "k1", "POST", "/pay?x=%41", '{"a": 1}', 30.0, None))
    assert by_bytes == (sql.CLAIM_BYTES, ("acme", "k1", b'POST /pay?x=%41\n{"a": 1}', 30.0, None))
    finish = statements.finish_statement("acme", "k1", 7, 201, b"", {"Location": "/p/1"}, 86400.0)
    assert finish == (sql.FINISH, ("acme", "k1", 7, 201, None, '{"Location": "/p/1"}', 86400.0))
    assert statements.release_statement("acme", "k1", 7) == (sql.RELEASE, ("acme", "k1", 7))
