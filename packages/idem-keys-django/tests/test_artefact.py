"""These tests run against the package as a user installs it: the wheel built from the sdist
(scripts/install_wheel.sh), in the venv's site-packages, not the source tree."""
import sys
from importlib import metadata
from pathlib import Path

import idem_keys_django


def test_imported_from_the_installed_wheel():
    where = Path(idem_keys_django.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents and "site-packages" in where.parts, where
    assert not (Path(__file__).resolve().parents[1] / "src") in where.parents


def test_the_metadata_a_registry_reads():
    meta = metadata.metadata("idem-keys-django")
    assert meta["Version"] == idem_keys_django.__version__ == "0.1.0"
    assert meta["License"] == "PostgreSQL" and meta["Requires-Python"] == ">=3.11"
    assert sorted(r.split(";")[0].lower() for r in meta.get_all("Requires-Dist")) == [
        "django<6.2,>=5.2", "djangorestframework>=3.16", "idem-keys-core<0.2,>=0.1.0", "psycopg<4,>=3.1.8"]
    assert meta["Summary"] and meta["Description-Content-Type"] == "text/markdown"
    files = {str(f) for f in metadata.files("idem-keys-django")}
    assert "idem_keys_django/py.typed" in files and "idem_keys_django/middleware.py" in files
    assert not any(f.startswith("idem_keys_core/") for f in files)  # the core is a wheel of its own
