"""Shared fixtures.

Real CDS/ISIS files live outside the project in ../shared/data/isis (see its
SOURCES.md); tests that need them use the `isis_data` fixture, which skips
cleanly when the folder is absent.  PYDB_TEST_DATA overrides the location.
"""

import os
import shutil
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


def copy_db(src, dst, extra=()) -> Path:
    """Copy a database's .mst and .xrf, plus the files of the `extra`
    extensions (e.g. ("fst", "stw")), into the folder `dst` (created).
    `src` is the base path or the .mst path; the files are found in any
    letter case of their extension and copied under lower-case ones.
    Returns the base path of the copy.  Raises FileNotFoundError when one
    of the files is missing."""
    src, dst = Path(src), Path(dst)
    if src.suffix.lower() == ".mst":
        src = src.with_suffix("")
    want = ("mst", "xrf") + tuple(extra)
    found = {f.suffix[1:].lower(): f for f in src.parent.iterdir()
             if f.stem == src.name and f.suffix[1:].lower() in want}
    dst.mkdir(parents=True, exist_ok=True)
    for ext in want:
        if ext not in found:
            raise FileNotFoundError(f"{src}.{ext}: no such file (in any letter case)")
        shutil.copy2(found[ext], dst / f"{src.name}.{ext}")
    return dst / src.name


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
