"""The HTTP suite's sample payments app (tests/http/README.md) on idem-keys-django. DATABASE_URL names a database
with idem_keys; IDEM_LEASE and IDEM_WAIT are PostgreSQL intervals; IDEM_OFF=1 runs it without the middleware (the
benchmark's baseline); IDEM_TX=1 turns on ATOMIC_REQUESTS, which the middleware follows into its transactional
mode (the view's ORM work, the claim and the answer in one transaction)."""
import os
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ["DATABASE_URL"])
TRANSACTIONAL = os.environ.get("IDEM_TX") == "1"
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
if os.environ.get("IDEM_OFF") != "1":
    MIDDLEWARE.append("idem_keys_django.middleware.IdempotencyMiddleware")
IDEM_KEYS = {
    "SCOPE": "payments.auth.tenant_of",
    "LEASE": os.environ.get("IDEM_LEASE", "30s"),
    "WAIT": os.environ.get("IDEM_WAIT") or None,
    "OUTCOME_HEADER": "Idempotency-Outcome",
    # TRANSACTIONAL is left to None: it follows ATOMIC_REQUESTS above.
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": "INFO"},
}
