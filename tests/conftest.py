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


@pytest.fixture(scope="session")
def unesb_cache(tmp_path_factory) -> Path:
    """A cache folder holding the crashtest's default database (synthetic
    unesb, 58,880 records, with its FST and native index), built once per
    session by pydb.unesb.default_database (pass it as PYDB_CACHE_DIR)."""
    from pydb import unesb
    cache = tmp_path_factory.mktemp("pydb-cache")
    unesb.default_database(cache_dir=cache)
    return cache
