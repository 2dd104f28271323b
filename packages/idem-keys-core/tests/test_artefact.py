"""These tests run against the package as a user installs it: the wheel built from the sdist
(scripts/install_wheel.sh), in the venv's site-packages, not the source tree."""
import sys
from importlib import metadata
from pathlib import Path

import idem_keys_core


def test_imported_from_the_installed_wheel():
    where = Path(idem_keys_core.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents and "site-packages" in where.parts, where
    assert not (Path(__file__).resolve().parents[1] / "src") in where.parents


def test_the_metadata_a_registry_reads():
    meta = metadata.metadata("idem-keys-core")
    assert meta["Version"] == idem_keys_core.__version__ == "0.1.0"
    assert meta["License"] == "PostgreSQL" and meta["Requires-Python"] == ">=3.11"
    assert meta.get_all("Requires-Dist") is None  # no driver, no framework
    assert meta["Summary"] and meta["Description-Content-Type"] == "text/markdown"
    files = {str(f) for f in metadata.files("idem-keys-core")}
    assert "idem_keys_core/py.typed" in files and "idem_keys_core/statements.py" in files
