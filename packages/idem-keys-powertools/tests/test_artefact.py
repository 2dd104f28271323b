"""These tests run against the package as a user installs it: the wheel built from the sdist
(scripts/install_wheel.sh), in the venv's site-packages, not the source tree."""
import sys
from importlib import metadata
from pathlib import Path

import idem_keys_powertools


def test_imported_from_the_installed_wheel():
    where = Path(idem_keys_powertools.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents and "site-packages" in where.parts, where
    assert not (Path(__file__).resolve().parents[1] / "src") in where.parents


def test_the_metadata_a_registry_reads():
    meta = metadata.metadata("idem-keys-powertools")
    assert meta["Version"] == __import__(meta["Name"].replace("-", "_")).__version__ == "0.1.0"
    assert meta["License"] == "PostgreSQL" and meta["Requires-Python"] == ">=3.11"
    assert meta["Summary"] and meta["Description-Content-Type"] == "text/markdown"
    python = f"Programming Language :: Python :: {sys.version_info.major}.{sys.version_info.minor}"
    assert python in meta.get_all("Classifier", []), f"the tests run on a Python the package does not name: {python}"
    files = {str(f) for f in metadata.files("idem-keys-powertools")}
    assert "idem_keys_powertools/py.typed" in files and "idem_keys_powertools/__init__.py" in files
