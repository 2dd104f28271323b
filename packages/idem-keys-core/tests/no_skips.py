"""A skipped test fails: every rule must run, here and in CI. The core's and the framework packages' conftest.py
import this hook (they find this directory on sys.path, as they find contract.py)."""
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped:
        report.outcome, report.longrepr = "failed", f"skipped, which this suite does not allow: {report.longrepr}"
    return report
