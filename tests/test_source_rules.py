"""Source-level rules of the C code (issue 9, item 6), checked on the text of
the sources and on the built module, not on behaviour.

(a) No Python C-API between ``Py_BEGIN_ALLOW_THREADS`` and
    ``Py_END_ALLOW_THREADS`` in the binding (pydb/*.c, pydb/*.h): the GIL is
    released there, so no ``Py*``/``_Py*`` identifier (calls, macros such as
    ``Py_INCREF`` or ``PyBytes_AS_STRING``, ``PyErr_*``) may appear.  The
    regions are found textually, after comments and string literals are
    blanked; ``Py_BLOCK_THREADS`` ... ``Py_UNBLOCK_THREADS`` inside a region
    take the GIL back and are allowed to call Python.  Types that call
    nothing (``Py_ssize_t``, ...) are allowed.  A macro that wraps the
    release (a ``#define`` in pydb/*.h or pydb/*.c whose body contains
    ``Py_BEGIN_ALLOW_THREADS``, such as the binding's ``UNLOCKED(g1, g2,
    ...)`` in pydb/_pydb_module.h) is checked twice: its body like any
    region, and at each use, the arguments whose parameter appears inside
    the released part of the body (a variadic ``...``, used as
    ``__VA_ARGS__``, takes all the remaining arguments).  Best effort: a
    wrapper of a wrapper, or a release through ``PyEval_SaveThread()``, is
    not followed.
(b) The built extension module exports only ``PyInit__pydb`` (``nm -D
    --defined-only``; everything else is hidden by -fvisibility=hidden).
(c) The core (csrc/) never includes Python.h.
(d) The file-level link graph of the core has no cycle (tools/linkgraph.py).
(e) The commit path asks no file's times: no ``fstat``/``stat``/``lstat``
    in csrc/txn.c, nor in the functions of csrc/wal.c and csrc/read.c that
    run at every commit, read-only open or refresh (they use ``pydb__fd_size`` /
    ``pydb__same_file``, which ``statx`` the size or inode alone).  On
    Linux 6.13 and later a stat that reports times makes the next write
    change its modification time, and the log's fdatasync writes it too
    (csrc/util.h).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

BINDING = REPO / "pydb"
CSRC = REPO / "csrc"

# C-API names that are types or constants: using them calls nothing.
ALLOWED_WITHOUT_GIL = {"Py_ssize_t", "Py_hash_t", "Py_UCS1", "Py_UCS2", "Py_UCS4",
                       "Py_buffer"}
PY_NAME = re.compile(r"\b_?Py[A-Za-z0-9_]*\b")
MARKERS = {"Py_BEGIN_ALLOW_THREADS", "Py_END_ALLOW_THREADS",
           "Py_BLOCK_THREADS", "Py_UNBLOCK_THREADS"}
MARKER = re.compile(r"\b(" + "|".join(sorted(MARKERS)) + r")\b")


def blank_comments_and_strings(text: str) -> str:
    """`text` with comments, string and character literals replaced by
    spaces (newlines kept, so line numbers stay right)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + text[j - 1:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def released_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of the text where the GIL is released."""
    spans, start = [], None
    for m in MARKER.finditer(text):
        word = m.group(1)
        if word in ("Py_BEGIN_ALLOW_THREADS", "Py_UNBLOCK_THREADS"):
            start = m.end()
        elif start is not None:                 # END or BLOCK: GIL held again
            spans.append((start, m.start()))
            start = None
    return spans


def param_pattern(param: str) -> str:
    """The regular expression of a macro parameter's uses in its body."""
    return r"\b__VA_ARGS__\b" if param == "..." else rf"\b{re.escape(param)}\b"


def wrappers(texts: dict[Path, str]) -> dict[str, tuple[list[str], set[str]]]:
    """{macro name: (parameters, parameters used while the GIL is released)}
    of every function-like #define whose body releases the GIL.  A variadic
    macro's last parameter is "..." (used as __VA_ARGS__)."""
    out = {}
    define = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)",
                        re.M)
    for text in texts.values():
        for m in define.finditer(text):
            body = m.group(3)
            if "Py_BEGIN_ALLOW_THREADS" not in body:
                continue
            params = [p.strip() for p in m.group(2).split(",") if p.strip()]
            inside = " ".join(body[a:b] for a, b in released_spans(body))
            out[m.group(1)] = (params, {p for p in params if re.search(param_pattern(p), inside)})
    return out


def call_arguments(text: str, open_paren: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the call whose '(' is at
    `open_paren`, and the offset after its ')'."""
    args, depth, cur = [], 0, open_paren + 1
    for i in range(open_paren, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[cur:i])
                return args, i + 1
        elif ch == "," and depth == 1:
            args.append(text[cur:i])
            cur = i + 1
    return args, len(text)


def binding_sources() -> dict[Path, str]:
    files = sorted(BINDING.glob("*.c")) + sorted(BINDING.glob("*.h"))
    return {p: blank_comments_and_strings(p.read_text(encoding="utf-8", errors="replace"))
            for p in files}


def wrapper_uses(texts: dict[Path, str]):
    """(file, line, macro, parameter, argument text) of each argument, at each
    use of a GIL-releasing macro, that the macro places in its released
    part; a variadic "..." gets the remaining arguments joined by commas."""
    for name, (params, inside) in wrappers(texts).items():
        use = re.compile(rf"\b{name}\s*\(")
        for path, text in texts.items():
            for m in use.finditer(text):
                line_start = text.rfind("\n", 0, m.start()) + 1
                if re.match(r"[ \t]*#[ \t]*define\b", text[line_start:m.start()]):
                    continue                    # the definition itself
                args, _ = call_arguments(text, m.end() - 1)
                for i, param in enumerate(params):
                    if param in inside and i < len(args):
                        arg = ",".join(args[i:]) if param == "..." else args[i]
                        yield path, line_of(text, m.start()), name, param, arg


def gil_violations(texts: dict[Path, str] | None = None) -> list[str]:
    texts = binding_sources() if texts is None else texts
    found = []
    for path, text in texts.items():
        for a, b in released_spans(text):
            for m in PY_NAME.finditer(text, a, b):
                if m.group(0) not in ALLOWED_WITHOUT_GIL | MARKERS:
                    found.append(f"{path.name}:{line_of(text, m.start())}: {m.group(0)} "
                                 "with the GIL released")
    for path, line, name, param, arg in wrapper_uses(texts):
        for py in PY_NAME.finditer(arg):
            if py.group(0) not in ALLOWED_WITHOUT_GIL:
                found.append(f"{path.name}:{line}: {py.group(0)} in argument {param!r} "
                             f"of {name}(), which releases the GIL")
    return found


# ------------------------------------------------------------- the checker

def test_checker_finds_a_call_in_a_released_region():
    """The parser itself: a call between the markers is found, one in a
    comment, a string or a Py_BLOCK_THREADS section is not."""
    src = blank_comments_and_strings(
        'Py_BEGIN_ALLOW_THREADS\n'
        '  /* Py_INCREF(x) */ n = f("PyErr_Occurred");\n'
        '  Py_BLOCK_THREADS PyErr_NoMemory(); Py_UNBLOCK_THREADS\n'
        '  Py_ssize_t k = PyBytes_GET_SIZE(b);\n'
        'Py_END_ALLOW_THREADS\n')
    names = [PY_NAME.findall(src[a:b]) for a, b in released_spans(src)]
    flat = [x for ns in names for x in ns if x not in ALLOWED_WITHOUT_GIL | MARKERS]
    assert flat == ["PyBytes_GET_SIZE"]
    w = wrappers({Path("x.h"): blank_comments_and_strings(
        "#define UNLOCKED(self, stmt) do { n++; Py_BEGIN_ALLOW_THREADS \\\n"
        "    stmt; (self)->x--; Py_END_ALLOW_THREADS } while (0)\n"
        "#define OTHER(a) f(a)\n")})
    assert w == {"UNLOCKED": (["self", "stmt"], {"self", "stmt"})}
    args, _ = call_arguments("UNLOCKED(self, rc = f(a, PyLong_AsLong(o)));", 8)
    assert args == ["self", " rc = f(a, PyLong_AsLong(o))"]


def test_checker_follows_a_variadic_wrapper():
    """A macro as pydb/_pydb_module.h's UNLOCKED(g1, g2, ...): the guards are
    evaluated before the release (not checked), every argument from the
    third on runs with the GIL released (checked, top-level commas too)."""
    texts = {Path("m.h"): blank_comments_and_strings(
        "#define UNLOCKED(g1, g2, ...) do { handle_guard *a_ = (g1), *b_ = (g2); \\\n"
        "    enter(a_, b_); Py_BEGIN_ALLOW_THREADS __VA_ARGS__; leave(a_, b_); \\\n"
        "    Py_END_ALLOW_THREADS } while (0)\n"),
        Path("u.c"): blank_comments_and_strings(
        "UNLOCKED(PyObject_GetAttr(o, n), NULL, rc = f(&e));\n"
        "UNLOCKED(&g, NULL, { a = 1, b = PyBytes_AS_STRING(x); });\n"
        "UNLOCKED(&g, NULL, a = 1, b = PyLong_AsLong(o));\n"
        "UNLOCKED(&g, NULL, rc = f(\"PyErr_Occurred\", &e)); /* Py_DECREF */\n")}
    assert wrappers(texts) == {"UNLOCKED": (["g1", "g2", "..."], {"..."})}
    assert gil_violations(texts) == [
        "u.c:2: PyBytes_AS_STRING in argument '...' of UNLOCKED(), which releases the GIL",
        "u.c:3: PyLong_AsLong in argument '...' of UNLOCKED(), which releases the GIL"]


# -------------------------------------------------------------- the rules

def test_no_python_api_while_the_gil_is_released():
    found = gil_violations()
    assert not found, "\n".join(found)


def test_gil_release_regions_are_found():
    """The check looks at something: the binding releases the GIL, mostly
    through UNLOCKED() (pydb/_pydb_module.h), whose statement arguments are
    checked at each use."""
    texts = binding_sources()
    assert "UNLOCKED" in wrappers(texts)
    regions = sum(len(released_spans(t)) for t in texts.values())
    uses = [u for u in wrapper_uses(texts) if u[2] == "UNLOCKED"]
    assert regions >= 1 and len(uses) >= 5, (regions, len(uses))


def _module_file() -> Path:
    from pydb import _pydb
    return Path(_pydb.__file__)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF dynamic symbols")
def test_module_exports_only_its_init_function():
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("nm (binutils) not found")
    so = _module_file()
    p = subprocess.run([nm, "-D", "--defined-only", str(so)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    names = {line.split()[-1] for line in p.stdout.splitlines() if line.strip()}
    # Symbols the linker itself defines in some toolchains.
    names -= {"_init", "_fini", "_edata", "_end", "__bss_start"}
    assert names == {"PyInit__pydb"}, sorted(names)


def test_core_never_includes_python_h():
    inc = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]Python\.h[>"]', re.M)
    files = sorted(CSRC.rglob("*.c")) + sorted(CSRC.rglob("*.h"))
    assert files
    bad = [p.relative_to(REPO).as_posix() for p in files
           if inc.search(blank_comments_and_strings(p.read_text(encoding="utf-8",
                                                                errors="replace")))]
    assert not bad, bad


def test_core_link_graph_has_no_cycle():
    if not (shutil.which("nm") and (shutil.which("cc") or shutil.which("gcc"))):
        pytest.skip("cc and nm needed")
    p = subprocess.run([sys.executable, str(REPO / "tools" / "linkgraph.py")],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert p.returncode == 0 and p.stdout.splitlines()[-1] == "no cycle", p.stdout


#: (file, functions of it on the commit or refresh path; None: all)
TIMELESS = [("txn.c", None),
            ("wal.c", ["wal_pending", "wal_unapplied", "pydb__wal_append",
                       "pydb__wal_mark_applied", "pydb__wal_close",
                       "wal_files_current", "pydb__wal_recover_readonly"]),
            ("read.c", ["pydb__refresh_sizes"])]
STAT_CALL = re.compile(r"\b(f|l)?stat(at)?\s*\(")


def c_function_body(text: str, name: str) -> str:
    """The body of C function `name` (its definition at a line start) in
    `text`, from its opening brace to the matching one."""
    m = re.search(r"^[A-Za-z_][^;{}]*\b" + re.escape(name) + r"\s*\([^;{]*\)\s*\{",
                  text, re.M)
    assert m, name
    depth, i = 0, m.end() - 1
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[m.end():i]
        i += 1


def test_the_commit_path_asks_no_file_times():
    for name, funcs in TIMELESS:
        text = blank_comments_and_strings((CSRC / name).read_text(encoding="utf-8"))
        bodies = [text] if funcs is None else [c_function_body(text, f) for f in funcs]
        for body in bodies:
            assert not STAT_CALL.search(body), (name, STAT_CALL.search(body).group(0))
    # the checker finds what it forbids
    assert STAT_CALL.search("if (fstat(fd, &st) != 0)") and STAT_CALL.search("stat(p, &b)")
    assert not STAT_CALL.search("statx(fd, \"\", 0, STATX_SIZE, &sx)")
