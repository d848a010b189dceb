"""Every code block of README.rst and docs/*.md runs, in order, as a
reader would type them (issue 15: no block can rot).

The blocks run in one namespace, in a temporary folder that holds what
the README names: ``data/cds.*`` (the CDS sample WinISIS ships, with its
FST, stop words and ISIS inverted file: pyisis's copy under the shared
data folder), ``cds.iso`` (isis2json's export of it, also as ``more.iso``,
``x.iso`` and ``dos.iso``) and ``x.mrc`` (pymarc's ``marc.dat``).
``.. code:: pycon`` blocks are doctests: their printed values are
checked.  ``.. code:: python`` blocks (and docs' python fences, each file
in a folder of its own) are executed.  Skipped when the
shared data folder or an optional package the blocks use (pymarc,
pyarrow) is absent.
"""

from __future__ import annotations

import doctest
import re
import shutil

import pytest

from conftest import REPO

BLOCK = re.compile(r"^\.\. code:: (python|pycon)\n\n((?:(?:    .*)?\n)+)", re.M)


def readme_blocks(text: str) -> list[tuple[str, str, int]]:
    """(kind, code, line) of each python/pycon block, in order."""
    out = []
    for m in BLOCK.finditer(text):
        code = "".join(line[4:] + "\n" for line in m.group(2).splitlines())
        out.append((m.group(1), code.rstrip() + "\n", text.count("\n", 0, m.start(2)) + 1))
    return out


def test_blocks_found():
    kinds = [k for k, _, _ in readme_blocks((REPO / "README.rst").read_text())]
    assert kinds.count("pycon") >= 1 and kinds.count("python") >= 8, kinds


@pytest.fixture
def workdir(tmp_path, isis_data, monkeypatch):
    sample = isis_data / "scieloorg__pyisis" / "pyisis" / "pyisis" / "sample"
    iso = isis_data / "bireme__isis2json" / "fixtures" / "cds" / "cds.iso"
    marc = isis_data / "edsu__pymarc" / "test" / "marc.dat"
    for f in (sample / "cds.mst", iso, marc):
        if not f.is_file():
            pytest.skip(f"{f} not found")
    (tmp_path / "data").mkdir()
    for f in sample.glob("cds.*"):
        shutil.copy(f, tmp_path / "data" / f.name)
    for name in ("cds.iso", "more.iso", "x.iso", "dos.iso"):
        shutil.copy(iso, tmp_path / name)
    shutil.copy(marc, tmp_path / "x.mrc")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_blocks_run(workdir):
    pytest.importorskip("pymarc")
    pytest.importorskip("pyarrow")
    ns: dict = {"__name__": "readme"}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    parser = doctest.DocTestParser()
    for kind, code, line in readme_blocks((REPO / "README.rst").read_text()):
        if kind == "pycon":
            test = parser.get_doctest(code, ns, f"README.rst:{line}", "README.rst", line)
            result = runner.run(test, clear_globs=False)
            assert result.failed == 0, f"README.rst line {line}: doctest failed (see output)"
            ns.update(test.globs)     # DocTest works on a copy
        else:
            try:
                exec(compile(code, f"README.rst:{line}", "exec"), ns)
            except Exception as e:
                raise AssertionError(f"README.rst block at line {line}: {e!r}") from e


FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
DOCS = sorted(p.name for p in (REPO / "docs").glob("*.md") if "```python" in p.read_text())


def test_docs_with_python_blocks_listed():
    assert "parquet.md" in DOCS and "design.md" in DOCS, DOCS


@pytest.mark.parametrize("doc", DOCS)
def test_docs_blocks_run(workdir, doc):
    text = (REPO / "docs" / doc).read_text()
    if "pyarrow" in text or "to_arrow" in text:
        pytest.importorskip("pyarrow")
    ns: dict = {"__name__": "docs"}
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start(1)) + 1
        try:
            exec(compile(m.group(1), f"docs/{doc}:{line}", "exec"), ns)
        except Exception as e:
            raise AssertionError(f"docs/{doc} block at line {line}: {e!r}") from e
