"""The key parser against every case of contract/keys.json."""
import pytest

from contract import load
from idem_keys_core import MAX_KEY_LENGTH, parse_idempotency_key

KEYS = load("keys")


@pytest.mark.parametrize("case", KEYS["cases"], ids=[c["name"] for c in KEYS["cases"]])
def test_every_case_of_the_contract(case):
    assert parse_idempotency_key(case["value"]) == case["key"]


def test_the_limit_is_the_contracts():
    assert MAX_KEY_LENGTH == KEYS["max_length"]


@pytest.mark.parametrize("value,key", [(" padded\t", "padded"), ('\t"quoted" ', "quoted")])
def test_the_optional_whitespace_around_a_field_value(value, key):
    """HTTP strips it; a client library or a test client may not have."""
    assert parse_idempotency_key(value) == key
