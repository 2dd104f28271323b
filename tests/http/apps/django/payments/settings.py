"""The HTTP suite's sample payments app (tests/http/README.md) on idem-keys-django. DATABASE_URL names a database
with idem_keys; IDEM_LEASE and IDEM_WAIT are seconds ("4", or "4s"); IDEM_OFF=1 runs it without the middleware (the
benchmark's baseline); IDEM_TX=1 turns on ATOMIC_REQUESTS, which the middleware follows into its transactional
mode (the view's ORM work, the claim and the answer in one transaction).
IDEM_PEER=django-idempotency-key: the benchmark's peer, what a Django team would pick instead: PyPI
django-idempotency-key in place of idem-keys-django (below); only the happy path is meant to work
(bench/http/rounds.py)."""
import os
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_url = urlsplit(os.environ["DATABASE_URL"])


def _seconds(name, default=None):
    """An environment variable of seconds: "4", or "4s" as the suite used to send it."""
    value = os.environ.get(name) or default
    return None if value is None else float(value.removesuffix("s"))


OFF = os.environ.get("IDEM_OFF") == "1"
TRANSACTIONAL = os.environ.get("IDEM_TX") == "1"
PEER = os.environ.get("IDEM_PEER")
if PEER is not None and PEER != "django-idempotency-key":
    raise ImproperlyConfigured(f"IDEM_PEER must be django-idempotency-key (the only peer), not {PEER!r}")
if PEER is not None and (OFF or TRANSACTIONAL):
    raise ImproperlyConfigured("IDEM_PEER replaces idem-keys-django: it does not combine with IDEM_OFF or IDEM_TX")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(_url.path.lstrip("/")),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        # One connection per server thread, kept between requests; a dead one is replaced at the next request.
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        # A database that went away answers 503 in seconds rather than hanging the client.
        "OPTIONS": {"connect_timeout": 5},
        "ATOMIC_REQUESTS": TRANSACTIONAL,
    }
}
SECRET_KEY = "idem_keys sample app"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
INSTALLED_APPS = ["idem_keys_django", "payments"]
ROOT_URLCONF = "payments.urls"
WSGI_APPLICATION = "payments.wsgi.application"
# Authentication first: the middleware's scope is its tenant.
MIDDLEWARE = ["payments.auth.BearerTenant"]
if PEER:
    # Its README's middleware for "all non-safe view functions": a POST without Idempotency-Key gets 400.
    MIDDLEWARE.append("idempotency_key.middleware.IdempotencyKeyMiddleware")
elif not OFF:
    MIDDLEWARE.append("idem_keys_django.middleware.IdempotencyMiddleware")
IDEM_KEYS = {
    "SCOPE": "payments.auth.tenant_of",
    "LEASE": _seconds("IDEM_LEASE", "30"),
    "WAIT": _seconds("IDEM_WAIT"),
    "OUTCOME_HEADER": "Idempotency-Outcome",
    # TRANSACTIONAL is left to None: it follows ATOMIC_REQUESTS above.
}
if PEER:
    # The peer's storage, as its README's settings offer it. Its default, MemoryKeyStorage, is a dict in one
    # process, lost on every restart and not seen by a second worker, so a team deploying it picks CacheKeyStorage
    # on one of Django's caches. Here that is Django's database cache, a table in the app's own PostgreSQL
    # (wsgi.py makes it at start, as `manage.py createcachetable` would): shared by every worker, durable with the
    # same commits as the payments, and no second service to run (the benchmark gives Redis to the Node peer
    # only). A stored answer lives a day (the Node peer's TTL), and the table is not culled: at Django's default
    # MAX_ENTRIES (300) a full table drops a third of its rows on the next write, answers still in their day
    # among them.
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "idempotency": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "idempotency_key_cache",
            "TIMEOUT": 24 * 60 * 60,
            "OPTIONS": {"MAX_ENTRIES": 2**62},
        },
    }
    IDEMPOTENCY_KEY = {
        # A replay gets the stored answer with its own status (201), not the package's default 409.
        "CONFLICT_STATUS_CODE": None,
        "STORAGE": {"CLASS": "idempotency_key.storage.CacheKeyStorage", "CACHE_NAME": "idempotency"},
        # The lock is left at its default, ThreadLock, one lock for the whole process (one gunicorn worker here;
        # MultiProcessRedisLock is its choice for several), taken around each lookup only: a request that waits
        # more than 0.1 s for it is answered 423.
    }
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": "INFO"},
}
