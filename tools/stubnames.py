#!/usr/bin/env python3
"""Check what ``mypy.stubtest`` skips in pydb/_pydb.pyi: private names.

stubtest does not report a private name (``_create``, ``_testing``, ...) of
the stub that the module lacks, nor look inside a module-valued attribute.
Most of pydb._pydb is private, so this script (run by tools/gate after
stubtest) checks, with the built module imported:

  1. every top-level name of the stub exists in pydb._pydb, except the
     stub-only helpers: type aliases (``_Path = ...``) and classes marked
     ``@type_check_only``;
  2. every private function and class of the module is in the stub;
  3. ``_testing`` (a module object) against the protocol that types it in
     the stub (the class named by its annotation): the same function names,
     and for each the same parameters (name, kind, default as written) as
     ``inspect.signature`` reads from the docstring's text signature.

Prints one line per finding and exits 1 if there is any, 0 otherwise.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "pydb" / "_pydb.pyi"

KINDS = {"posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
         "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
         "kwonlyargs": inspect.Parameter.KEYWORD_ONLY}


def decorators(node: ast.ClassDef | ast.FunctionDef) -> set[str]:
    return {ast.unparse(d).rsplit(".", 1)[-1] for d in node.decorator_list}


def stub_params(fn: ast.FunctionDef) -> list[tuple[str, inspect._ParameterKind, str | None]]:
    """(name, kind, default source or None) of `fn`'s parameters, self dropped."""
    a = fn.args
    positional = [("posonlyargs", x) for x in a.posonlyargs] + [("args", x) for x in a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [(x.arg, KINDS[k], None if d is None else ast.unparse(d))
           for (k, x), d in zip(positional, defaults, strict=True)]
    out += [(x.arg, KINDS["kwonlyargs"], None if d is None else ast.unparse(d))
            for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
    if a.vararg or a.kwarg:
        out.append(("*", inspect.Parameter.VAR_POSITIONAL, None))
    return out[1:] if out and out[0][0] == "self" else out


def runtime_params(obj: object) -> list[tuple[str, inspect._ParameterKind, str | None]]:
    sig = inspect.signature(obj)  # type: ignore[arg-type]
    return [(p.name, p.kind, None if p.default is p.empty else repr(p.default))
            for p in sig.parameters.values()]


def main() -> int:
    sys.path.insert(0, str(ROOT))       # the checkout's pydb (built in place or -e)
    from pydb import _pydb

    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    stub_names: dict[str, str] = {}   # name -> what it is in the stub
    annotations: dict[str, str] = {}
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            if "type_check_only" not in decorators(n):
                stub_names[n.name] = "class"
        elif isinstance(n, ast.FunctionDef):
            stub_names[n.name] = "function"
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            stub_names[n.target.id] = "variable"
            annotations[n.target.id] = ast.unparse(n.annotation)
        # plain assignments are type aliases: stub-only

    found = []
    for name, what in sorted(stub_names.items()):
        if not hasattr(_pydb, name):
            found.append(f"_pydb.pyi: {what} {name} is not in pydb._pydb")
    for name in sorted(dir(_pydb)):
        if name.startswith("__") or name in stub_names:
            continue
        found.append(f"pydb._pydb.{name} ({type(getattr(_pydb, name)).__name__}) "
                     "is not in _pydb.pyi")

    testing = getattr(_pydb, "_testing", None)
    proto = classes.get(annotations.get("_testing", ""))
    if testing is None or proto is None:
        found.append("_testing: no module object at runtime, or no protocol class "
                     "annotating `_testing: <class>` in the stub")
    else:
        methods = {n.name: n for n in proto.body if isinstance(n, ast.FunctionDef)}
        runtime = {n for n in dir(testing) if not n.startswith("_")}
        for name in sorted(set(methods) - runtime):
            found.append(f"_pydb.pyi: _testing.{name} is not in pydb._pydb._testing")
        for name in sorted(runtime - set(methods)):
            found.append(f"pydb._pydb._testing.{name} is not in _pydb.pyi ({proto.name})")
        for name in sorted(set(methods) & runtime):
            try:
                have = runtime_params(getattr(testing, name))
            except ValueError:
                found.append(f"pydb._pydb._testing.{name}: no text signature in its docstring")
                continue
            want = stub_params(methods[name])
            if have != want:
                def fmt(ps: list[tuple[str, inspect._ParameterKind, str | None]]) -> str:
                    return ", ".join(f"{n}:{k.name}={d}" for n, k, d in ps)
                found.append(f"_testing.{name}: stub ({fmt(want)}) != runtime ({fmt(have)})")
    for line in found:
        print(line)
    checked = len(stub_names) + (len(proto.body) if proto else 0)
    print(f"stubnames: {len(found)} finding(s) ({checked} stub entries checked)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
