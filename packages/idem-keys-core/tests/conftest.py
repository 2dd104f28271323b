"""The core's tests: the rule that a skip fails (no_skips.py, shared with the framework packages' tests)."""
from no_skips import pytest_runtest_makereport  # noqa: F401  (a hook: pytest finds it here)
