"""The option vocabulary, and every bad value of every option refused with its name (and, for a duration, the
word seconds)."""
import logging
from datetime import timedelta

import pytest

from idem_keys_core import options
from idem_keys_core.answers import DEFAULT_STORED_HEADERS, headers_to_store, replay_fields


def test_the_vocabulary():
    assert options.VOCABULARY == ("scope", "lease", "wait", "retention", "methods", "required", "retryable_statuses",
                                  "stored_headers", "outcome_header", "max_body_bytes", "transactional", "logger")


@pytest.mark.parametrize(("value", "seconds"), [(None, None), (30, 30.0), (0.5, 0.5), (timedelta(minutes=2), 120.0)])
def test_durations_are_seconds(value, seconds):
    assert options.seconds("lease", value) == seconds


@pytest.mark.parametrize(("value", "error"), [
    ("30s", TypeError), ("2 minutes", TypeError), ("30", TypeError), (True, TypeError), ([30], TypeError),
    (0, ValueError), (-1, ValueError), (timedelta(seconds=-1), ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError),
])
def test_a_bad_duration_names_the_option_and_seconds(value, error):
    with pytest.raises(error, match=r"^lease must be .*seconds"):
        options.seconds("lease", value)


def test_zero_where_it_is_allowed():
    assert options.seconds("wait", 0, allow_zero=True) == 0.0
    with pytest.raises(ValueError, match="^wait must be zero or more seconds"):
        options.seconds("wait", -0.5, allow_zero=True)


@pytest.mark.parametrize(("check", "good", "result"), [
    (options.flag, True, True),
    (options.methods, ["post", "PUT"], frozenset({"POST", "PUT"})),
    (options.statuses, (429, 503), frozenset({429, 503})),
    (options.stored_headers, ["ETag", "x-Trace"], {"etag": "ETag", "x-trace": "x-Trace"}),
    (options.header_name, "Idempotency-Outcome", "Idempotency-Outcome"),
    (options.header_name, None, None),
    (options.max_body_bytes, 4096, 4096),
])
def test_good_values(check, good, result):
    assert check("the_option", good) == result


@pytest.mark.parametrize(("check", "bad", "error"), [
    (options.flag, "yes", TypeError), (options.flag, 1, TypeError),
    (options.methods, "POST", TypeError), (options.methods, ["POST", "TWO WORDS"], ValueError),
    (options.methods, [1], ValueError),
    (options.statuses, "429", TypeError), (options.statuses, [True], TypeError),
    (options.statuses, [429, 700], ValueError),
    (options.stored_headers, "ETag", TypeError), (options.stored_headers, ["not a name"], ValueError),
    (options.stored_headers, ["ETag", "Content-Length"], ValueError),
    (options.stored_headers, ["transfer-encoding"], ValueError),
    (options.header_name, "Idempotency Outcome", TypeError), (options.header_name, 42, TypeError),
    (options.max_body_bytes, 0, ValueError), (options.max_body_bytes, -1, ValueError),
    (options.max_body_bytes, True, TypeError), (options.max_body_bytes, 1.5, TypeError),
])
def test_bad_values_name_the_option(check, bad, error):
    with pytest.raises(error, match="^the_option "):
        check("the_option", bad)


def test_the_logger():
    mine = logging.getLogger("mine")
    adapter = logging.LoggerAdapter(mine, {})
    assert options.logger("logger", None, "idem_keys_x") is logging.getLogger("idem_keys_x")
    assert options.logger("logger", "mine", "idem_keys_x") is mine
    assert options.logger("logger", adapter, "idem_keys_x") is adapter
    with pytest.raises(TypeError, match="^logger must be"):
        options.logger("logger", print, "idem_keys_x")


def test_the_stored_headers_and_the_replayed_ones():
    stored = options.stored_headers("stored_headers", DEFAULT_STORED_HEADERS)
    fields = [("content-type", "application/json"), ("LINK", "</a>; rel=a"), ("Link", "</b>; rel=b"),
              ("X-Request-Id", "r1"), ("Content-Length", "42")]
    assert headers_to_store(fields, stored) == {"Content-Type": "application/json", "Link": "</a>; rel=a, </b>; rel=b"}
    assert replay_fields({"Location": "/p/1", "Content-Length": "9", "transfer-encoding": "chunked"}) == [
        ("Location", "/p/1")]
    assert replay_fields(None) == []
