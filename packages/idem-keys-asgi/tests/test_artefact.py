"""These tests run against the package as a user installs it: the wheel built from the sdist
(scripts/install_wheel.sh), in the venv's site-packages, not the source tree."""
import sys
from importlib import metadata
from pathlib import Path

import idem_keys_asgi


def test_imported_from_the_installed_wheel():
    where = Path(idem_keys_asgi.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents and "site-packages" in where.parts, where
    assert not (Path(__file__).resolve().parents[1] / "src") in where.parents


def test_the_metadata_a_registry_reads():
    meta = metadata.metadata("idem-keys-asgi")
    assert meta["Version"] == __import__(meta["Name"].replace("-", "_")).__version__ == "0.1.0"
    assert meta["License"] == "PostgreSQL" and meta["Requires-Python"] == ">=3.11"
    assert meta["Summary"] and meta["Description-Content-Type"] == "text/markdown"
    assert sorted(meta.get_all("Requires-Dist")) == ["idem-keys-core<0.2,>=0.1.0", "psycopg-pool>=3.2",
                                                     "psycopg<4,>=3.1"]
    files = {str(f) for f in metadata.files("idem-keys-asgi")}
    assert "idem_keys_asgi/py.typed" in files and "idem_keys_asgi/__init__.py" in files
    assert not any(f.startswith("idem_keys_core/") for f in files)  # the core is a wheel of its own
