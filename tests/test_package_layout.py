"""The layout of the pydb package: every module imports on its own, the
module import graph has no cycle, and no function imports a pydb module
to dodge one.

Layers, bottom up (each module imports only modules below it):
errors, paths -> subfields, iso2709, jsonl, fst, search -> index ->
native, check -> database -> exchange -> unesb, ministat, crashtest ->
__main__ (CLI); __init__ re-exports the public names.  The test checks the
property (no cycle), not this exact order, so a module may move between
layers without touching the test.

Allowed: ``if TYPE_CHECKING:`` imports (annotations only, never run), and
function-level imports of optional third-party modules (matplotlib for
crashtest plots, tqdm for progress bars), which must not be needed just to
import pydb.
"""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "pydb"
MODULES = sorted(p.stem for p in PKG.glob("*.py"))


def _resolve(node, importer):
    """The pydb modules (dotted names) an import statement in module
    `importer` names; [] for anything outside the package."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name == "pydb" or a.name.startswith("pydb.")]
    if node.level == 0:
        mod = node.module or ""
        if mod != "pydb" and not mod.startswith("pydb."):
            return []
        base = mod
    else:
        # pydb/*.py are all directly in the package: level 1 is "pydb"
        assert node.level == 1, f"pydb.{importer}: relative import of level {node.level}"
        base = "pydb" + (f".{node.module}" if node.module else "")
    if base == "pydb":
        # "from . import x": x is a submodule when pydb/x.py exists
        # (_pydb, the C extension, is a leaf of the graph)
        return [f"pydb.{a.name}" for a in node.names
                if (PKG / f"{a.name}.py").exists() or a.name == "_pydb"] or ["pydb"]
    return [base]


def _is_type_checking(node):
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _scan(name):
    """(module-level pydb imports, function-level pydb imports as
    (line, text)) of pydb/<name>.py."""
    tree = ast.parse((PKG / f"{name}.py").read_text(encoding="utf-8"))
    top, nested = set(), []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child) and not in_function:
                continue       # annotations only: not executed
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                targets = _resolve(child, name)
                if in_function and (targets or getattr(child, "level", 0)):
                    nested.append((child.lineno, ast.unparse(child)))
                elif not in_function:
                    top.update(targets)
            inner = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, inner)

    visit(tree, False)
    return top, nested


def _graph():
    graph = {}
    for name in MODULES:
        me = "pydb" if name == "__init__" else f"pydb.{name}"
        top, _ = _scan(name)
        graph[me] = {t for t in top if t != me and t != "pydb._pydb"}
    return graph


def test_no_function_level_imports_of_pydb():
    """No function imports a pydb module (absolute or relative): such an
    import hides a cycle or a layering fault from the module header."""
    found = [f"pydb/{name}.py:{line}: {text}" for name in MODULES
             for line, text in _scan(name)[1]]
    assert not found, "function-level imports of pydb modules:\n" + "\n".join(found)


def test_import_graph_has_no_cycle():
    graph = _graph()
    # only the package's __init__ imports "pydb" itself (other modules use
    # relative imports of the modules they need)
    assert all("pydb" not in deps for mod, deps in graph.items() if mod != "pydb"), graph
    state = {}
    stack = []

    def visit(mod):
        state[mod] = "open"
        stack.append(mod)
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == "open":
                cycle = stack[stack.index(dep):] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[mod] = "done"

    for mod in sorted(graph):
        if mod not in state:
            visit(mod)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_alone(name):
    """Each module imports first thing in a fresh interpreter (an import
    cycle that only shows with one particular first import fails here)."""
    mod = "pydb" if name == "__init__" else f"pydb.{name}"
    r = subprocess.run([sys.executable, "-c", f"import {mod}"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_checkout_without_extension_says_what_to_do(tmp_path):
    """A source checkout whose C extension is not built: importing pydb
    (and ``python -m pydb``) fails with an ImportError that says how to
    build it, instead of running some other installed copy."""
    (tmp_path / "setup.py").write_text("# a checkout\n")
    (tmp_path / "pydb").mkdir()
    for p in PKG.glob("*.py"):
        shutil.copy(p, tmp_path / "pydb" / p.name)
    for argv in (["-c", "import pydb"], ["-m", "pydb", "--help"]):
        r = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode != 0
        assert "ImportError" in r.stderr
        assert "pip install -e ." in r.stderr
        assert "python setup.py build_ext --inplace" in r.stderr
    # not a checkout (no setup.py beside the package): never the checkout's
    # message; the plain ImportError, or (under an editable install of
    # pydb, whose import hook supplies pydb._pydb) a working import
    (tmp_path / "setup.py").unlink()
    r = subprocess.run([sys.executable, "-c", "import pydb"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert "pip install -e ." not in r.stderr
    assert r.returncode == 0 or "ImportError" in r.stderr
