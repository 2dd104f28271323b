"""IDEM_KEYS is checked at start-up: Django's system checks name every mistake with its id, and the middleware
(made when Django loads its chain) and the decorator refuse to run with one."""
from datetime import timedelta

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse

from idem_keys_django import conf
from idem_keys_django.middleware import IdempotencyMiddleware
from idem_keys_django.views import IdempotentMixin, idempotent

BASE = {"SCOPE": "project.auth.tenant_of"}


def ids(found):
    return sorted(m.id for m in found)


@pytest.mark.parametrize("idem_keys,expected", [
    ({}, ["idem_keys.E002"]),  # no scope: there is no default
    ([("SCOPE", "x")], ["idem_keys.E001"]),
    ({**BASE, "LEASSE": "1 min"}, ["idem_keys.E001"]),  # a typo is not ignored
    ({"SCOPE": "project.auth.no_such_function"}, ["idem_keys.E002"]),
    ({"SCOPE": 42}, ["idem_keys.E002"]),
    ({**BASE, "PATHS": ["(unclosed"]}, ["idem_keys.E003"]),
    ({**BASE, "METHODS": "POST"}, ["idem_keys.E004"]),  # a string, not a list
    ({**BASE, "METHODS": ["POST", "TWO WORDS"]}, ["idem_keys.E004"]),
    ({**BASE, "REQUIRED": "yes"}, ["idem_keys.E005"]),
    ({**BASE, "LEASE": 0}, ["idem_keys.E006"]),
    ({**BASE, "LEASE": timedelta(seconds=-1)}, ["idem_keys.E006"]),
    ({**BASE, "WAIT": -1}, ["idem_keys.E006"]),
    ({**BASE, "RETENTION": ""}, ["idem_keys.E006"]),
    ({**BASE, "LEASE": [1]}, ["idem_keys.E006"]),
    ({**BASE, "RETRYABLE_STATUSES": [429, 700]}, ["idem_keys.E007"]),
    ({**BASE, "RETRYABLE_STATUSES": [True]}, ["idem_keys.E007"]),
    ({**BASE, "HEADER_ALLOW_LIST": ["ETag", "Content-Length"]}, ["idem_keys.E008"]),
    ({**BASE, "HEADER_ALLOW_LIST": ["not a name"]}, ["idem_keys.E008"]),
    ({**BASE, "OUTCOME_HEADER": "Idempotency Outcome"}, ["idem_keys.E009"]),
    ({**BASE, "MAX_BODY_BYTES": 0}, ["idem_keys.E010"]),
    ({**BASE, "MAX_BODY_BYTES": True}, ["idem_keys.E010"]),
    ({**BASE, "DATABASE": "nowhere"}, ["idem_keys.E011"]),
    ({**BASE, "TRANSACTIONAL": "yes"}, ["idem_keys.E012"]),
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
                          "LEASE": "2 minutes", "WAIT": 0, "RETENTION": timedelta(hours=1),
                          "RETRYABLE_STATUSES": [429, 503, 504], "HEADER_ALLOW_LIST": ["ETag"],
                          "OUTCOME_HEADER": "Idempotency-Outcome", "MAX_BODY_BYTES": 4096, "DATABASE": "atomic",
                          "TRANSACTIONAL": None}
    assert checks.run_checks(tags=["idem_keys"]) == []
    options = conf.load()
    assert options.methods == {"POST", "PUT"} and options.wait is None and options.stored_headers == {"etag": "ETag"}
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


def test_the_database_check(settings):
    """With --database: the functions are there, and PostgreSQL reads the interval strings."""
    settings.IDEM_KEYS = {**BASE, "LEASE": "2 minutes", "WAIT": "soon"}
    found = checks.run_checks(tags=[checks.Tags.database], databases=["default"])
    assert ids(found) == ["idem_keys.E102"] and "'soon'" in found[0].msg
    settings.IDEM_KEYS = {**BASE, "DATABASE": "down"}
    assert ids(checks.run_checks(tags=[checks.Tags.database], databases=["down"])) == ["idem_keys.E100"]
    assert checks.run_checks(tags=[checks.Tags.database], databases=["default"]) == []  # not its database


def test_the_view_decorator_and_mixin_check_their_options(settings):
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E006"):
        idempotent(lease=-5)(lambda request: HttpResponse())
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E001"):
        idempotent(leese="1s")(lambda request: HttpResponse())

    class Broken(IdempotentMixin):
        idempotency_options = {"methods": "POST"}
    with pytest.raises(ImproperlyConfigured, match="idem_keys.E004"):
        Broken.as_view()


def test_async_views_go_through_the_middleware():
    async def view(request):
        return HttpResponse()
    with pytest.raises(ImproperlyConfigured, match="async view"):
        idempotent(view)
