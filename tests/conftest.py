"""Shared fixtures.

Real CDS/ISIS files live outside the project in ../shared/data/isis (see its
SOURCES.md); tests that need them use the `isis_data` fixture, which skips
cleanly when the folder is absent.  PYDB_TEST_DATA overrides the location.
"""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PYDB_TEST_DATA", REPO.parent / "shared" / "data" / "isis"))


def data_path(rel: str) -> Path:
    """Path of a file under the shared data folder (may not exist)."""
    return DATA / rel


@pytest.fixture(scope="session")
def isis_data() -> Path:
    """The folder of real CDS/ISIS files; skips the test if absent."""
    if not DATA.is_dir():
        pytest.skip(f"real CDS/ISIS data not found at {DATA}")
    return DATA


def all_master_files():
    """Every .mst under the data folder (empty list when absent)."""
    if not DATA.is_dir():
        return []
    return sorted(p for p in DATA.rglob("*") if p.suffix.lower() == ".mst")
