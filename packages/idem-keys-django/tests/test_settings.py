"""IDEM_KEYS is checked at start-up: Django's system checks name every mistake with its id, and the middleware
(made when Django loads its chain) and the decorator refuse to run with one."""
import logging
import re
from datetime import timedelta

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse

from idem_keys_core.options import VOCABULARY
from idem_keys_django import conf
from idem_keys_django.middleware import IdempotencyMiddleware
from idem_keys_django.views import IdempotentMixin, idempotent

BASE = {"SCOPE": "project.auth.tenant_of"}


def ids(found):
    return sorted(m.id for m in found)


@pytest.mark.parametrize("idem_keys,expected", [
    ({}, ["idem_keys.E002"]),  # no scope: there is no default
    ([("SCOPE", "x")], ["idem_keys.E001"]),
    ({**BASE, "LEASSE": 60}, ["idem_keys.E001"]),  # a typo is not ignored
    ({"SCOPE": "project.auth.no_such_function"}, ["idem_keys.E002"]),
    ({"SCOPE": 42}, ["idem_keys.E002"]),
    ({**BASE, "PATHS": ["(unclosed"]}, ["idem_keys.E003"]),
    ({**BASE, "METHODS": "POST"}, ["idem_keys.E004"]),  # a string, not a list
    ({**BASE, "METHODS": ["POST", "TWO WORDS"]}, ["idem_keys.E004"]),
    ({**BASE, "REQUIRED": "yes"}, ["idem_keys.E005"]),
    ({**BASE, "LEASE": 0}, ["idem_keys.E006"]),
    ({**BASE, "LEASE": timedelta(seconds=-1)}, ["idem_keys.E006"]),
    ({**BASE, "LEASE": "2 minutes"}, ["idem_keys.E006"]),  # PostgreSQL interval strings are no longer taken
    ({**BASE, "WAIT": -1}, ["idem_keys.E006"]),
    ({**BASE, "WAIT": "5s"}, ["idem_keys.E006"]),
    ({**BASE, "RETENTION": ""}, ["idem_keys.E006"]),
    ({**BASE, "RETENTION": float("nan")}, ["idem_keys.E006"]),
    ({**BASE, "LEASE": [1]}, ["idem_keys.E006"]),
    ({**BASE, "LEASE": True}, ["idem_keys.E006"]),
    ({**BASE, "RETRYABLE_STATUSES": [429, 700]}, ["idem_keys.E007"]),
    ({**BASE, "RETRYABLE_STATUSES": [True]}, ["idem_keys.E007"]),
    ({**BASE, "RETRYABLE_STATUSES": 429}, ["idem_keys.E007"]),
    ({**BASE, "STORED_HEADERS": ["ETag", "Content-Length"]}, ["idem_keys.E008"]),
    ({**BASE, "STORED_HEADERS": ["not a name"]}, ["idem_keys.E008"]),
    ({**BASE, "STORED_HEADERS": "ETag"}, ["idem_keys.E008"]),
    ({**BASE, "HEADER_ALLOW_LIST": ["ETag"]}, ["idem_keys.E013"]),  # the old name: refused, naming the new one
    ({**BASE, "OUTCOME_HEADER": "Idempotency Outcome"}, ["idem_keys.E009"]),
    ({**BASE, "MAX_BODY_BYTES": 0}, ["idem_keys.E010"]),
    ({**BASE, "MAX_BODY_BYTES": True}, ["idem_keys.E010"]),
    ({**BASE, "DATABASE": "nowhere"}, ["idem_keys.E011"]),
    ({**BASE, "TRANSACTIONAL": "yes"}, ["idem_keys.E012"]),
    ({**BASE, "LOGGER": 42}, ["idem_keys.E014"]),
    ({"LEASE": 0, "MAX_BODY_BYTES": -1}, ["idem_keys.E002", "idem_keys.E006", "idem_keys.E010"]),  # all at once
])
def test_each_mistake_has_its_check(settings, idem_keys, expected):
    settings.IDEM_KEYS = idem_keys
    found = checks.run_checks(tags=["idem_keys"])
    assert ids(found) == expected
    assert all(m.level == checks.ERROR for m in found)
    with pytest.raises(ImproperlyConfigured) as refused:
        IdempotencyMiddleware(lambda request: HttpResponse())
    assert all(i in str(refused.value) for i in expected)


def test_a_good_setting_passes(settings):
    settings.IDEM_KEYS = {**BASE, "PATHS": r"^/api/", "METHODS": ["post", "PUT"], "REQUIRED": False,
                          "LEASE": 120, "WAIT": 0, "RETENTION": timedelta(hours=1),
                          "RETRYABLE_STATUSES": [429, 503, 504], "STORED_HEADERS": ["ETag"],
                          "OUTCOME_HEADER": "Idempotency-Outcome", "MAX_BODY_BYTES": 4096, "DATABASE": "atomic",
                          "TRANSACTIONAL": None, "LOGGER": "shop.idempotency"}
    assert checks.run_checks(tags=["idem_keys"]) == []
    options = conf.load()
    assert options.methods == {"POST", "PUT"} and options.wait is None and options.stored_headers == {"etag": "ETag"}
    assert (options.lease, options.retention) == (120.0, 3600.0)  # seconds, as the statements send them
    assert options.log is logging.getLogger("shop.idempotency")
    assert options.transactional is True  # None follows the alias' ATOMIC_REQUESTS
    assert conf.load({"transactional": False}).transactional is False  # a view's own options win


def test_the_scope_may_be_the_function_itself(settings):
    settings.IDEM_KEYS = {"SCOPE": lambda request: "acme"}
    assert checks.run_checks(tags=["idem_keys"]) == []


def test_a_body_limit_above_djangos_is_a_warning(settings):
    settings.IDEM_KEYS = {**BASE, "MAX_BODY_BYTES": 10 << 20}
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1 << 20
    found = checks.run_checks(tags=["idem_keys"])
    assert ids(found) == ["idem_keys.W001"] and found[0].level == checks.WARNING


def test_the_keys_are_the_vocabulary():
    """The shared vocabulary in upper case, and the package's own PATHS and DATABASE: nothing else."""
    assert set(conf.DEFAULTS) == {name.upper() for name in VOCABULARY} | {"PATHS", "DATABASE"}


@pytest.mark.parametrize(("key", "value", "says"), [
    ("LEASE", "30s", "IDEM_KEYS['LEASE'] must be seconds"),
    ("WAIT", -1, "IDEM_KEYS['WAIT'] must be zero or more seconds"),
    ("RETENTION", 0, "IDEM_KEYS['RETENTION'] must be more than zero seconds"),
    ("HEADER_ALLOW_LIST", ["ETag"], "IDEM_KEYS['HEADER_ALLOW_LIST'] is now IDEM_KEYS['STORED_HEADERS']"),
    ("LOGGER", 42, "IDEM_KEYS['LOGGER'] must be a logging.Logger"),
])
def test_the_error_names_the_key(settings, key, value, says):
    settings.IDEM_KEYS = {**BASE, key: value}
    (found,) = checks.run_checks(tags=["idem_keys"])
    assert found.msg.startswith(says), found.msg
    with pytest.raises(ImproperlyConfigured, match=re.escape(says)):
        IdempotencyMiddleware(lambda request: HttpResponse())


def test_the_database_check(settings):
    """With --database: the functions are there, or the database could not be reached."""
    settings.IDEM_KEYS = BASE
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []
    settings.IDEM_KEYS = {**BASE, "DATABASE": "down"}
    assert ids(checks.run_checks(tags=[checks.Tags.database], databases=["down"])) == ["idem_keys.E100"]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []  # not its database


def test_the_view_decorator_and_mixin_check_their_options(settings):
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E006"):
        idempotent(lease=-5)(lambda request: HttpResponse())
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E001"):
        idempotent(leese=1)(lambda request: HttpResponse())
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E013"):
        idempotent(header_allow_list=["ETag"])(lambda request: HttpResponse())

    class Broken(IdempotentMixin):
        idempotency_options = {"methods": "POST"}
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E004"):
        Broken.as_view()


def test_async_views_go_through_the_middleware():
    async def view(request):
        return HttpResponse()
    with pytest.raises(ImproperlyConfigured, match="async view"):
        idempotent(view)
