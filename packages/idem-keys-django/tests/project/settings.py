"""The test project: $DATABASE_URL (a database with idem_keys, or its portable edition) under several aliases: one
with ATOMIC_REQUESTS, two whose connections outlive a request (CONN_MAX_AGE), one that cannot be reached."""
import os
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ["DATABASE_URL"])
_database = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": unquote(_url.path.lstrip("/")),
    "USER": unquote(_url.username or ""),
    "PASSWORD": unquote(_url.password or ""),
    "HOST": _url.hostname or "",
    "PORT": str(_url.port or ""),
    "TEST": {"NAME": unquote(_url.path.lstrip("/"))},  # the tests run on the database itself (conftest.py)
}
DATABASES = {
    "default": _database,
    # The same database, with Django's transaction per request: the middleware follows it by default.
    "atomic": {**_database, "ATOMIC_REQUESTS": True},
    # Kept between requests, as in production; the restart tests end their sessions by application_name.
    "persistent": {**_database, "CONN_MAX_AGE": 60, "OPTIONS": {"application_name": "idem-django-persistent"}},
    "persistent_checked": {**_database, "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True,
                           "OPTIONS": {"application_name": "idem-django-checked"}},
    # Nothing listens on port 1 of the loopback: every connection is refused at once.
    "down": {**_database, "HOST": "127.0.0.1", "PORT": "1", "OPTIONS": {"connect_timeout": 2}},
}
SECRET_KEY = "idem-keys-django tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = ["idem_keys_django", "rest_framework"]
ROOT_URLCONF = "project.urls"
MIDDLEWARE = ["project.auth.Authenticate", "idem_keys_django.middleware.IdempotencyMiddleware"]
IDEM_KEYS = {
    "SCOPE": "project.auth.tenant_of",
    "OUTCOME_HEADER": "Idempotency-Outcome",
    # The middleware covers these; the views under /decorated and /drf claim their keys themselves.
    "PATHS": [r"^/pay", r"^/async"],
}
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["project.auth.TenantAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "UNAUTHENTICATED_USER": None,  # no django.contrib.auth here
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
