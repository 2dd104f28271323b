"""The Django app: add "idem_keys_django" to INSTALLED_APPS so its system checks run (it has no models)."""
from django.apps import AppConfig


class IdemKeysConfig(AppConfig):
    name = "idem_keys_django"
    verbose_name = "Idempotency keys (idem_keys)"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers them)
