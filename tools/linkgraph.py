#!/usr/bin/env python3
"""Print the file-level link graph of the C core and say whether it has a cycle.

    python tools/linkgraph.py                # compile csrc/*.c into a temp dir
    python tools/linkgraph.py csrc/*.o       # or take object files already built

Each core source file is compiled on its own (``$CC -c``, default ``cc``) into
a temporary folder; ``nm`` then lists, per object, the symbols it defines and
the ones it leaves undefined.  An edge ``a -> b`` means that ``a.o`` uses a
symbol that ``b.o`` defines.  Symbols no core object defines (libc, pthread)
are ignored.

Output: one line per object, ``a -> b, c`` (``a -> (none)`` for a leaf), then
either ``no cycle`` or, for each knot (strongly connected component of more
than one file), a ``knot:`` line and one ``cycle: a -> b -> a`` line per
elementary cycle in it.

Exit status: 0 without a cycle, 1 with one, 2 when the objects cannot be
built or read.  No dependency beyond Python and binutils' ``nm``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"


def compile_objects(sources: list[Path], outdir: Path) -> list[Path]:
    cc = shlex.split(os.environ.get("CC", "cc"))
    objs = []
    for src in sources:
        obj = outdir / (src.stem + ".o")
        cmd = [*cc, "-std=gnu11", "-O0", "-pthread", "-I", str(src.parent), "-c", str(src),
               "-o", str(obj)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed:\n{p.stderr}")
        objs.append(obj)
    return objs


def symbols(obj: Path) -> tuple[set[str], set[str]]:
    """(defined external symbols, undefined symbols) of one object file."""
    p = subprocess.run(["nm", "-P", str(obj)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"nm {obj} failed:\n{p.stderr}")
    defined, undefined = set(), set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() or kind in ("u", "v", "w"):   # global (or weak) definitions
            defined.add(name)
    return defined, undefined


def link_graph(objs: list[Path]) -> dict[str, set[str]]:
    """{file: set of files it needs}, files named by source stem + '.c'."""
    names = {obj: obj.stem + ".c" for obj in objs}
    table = {obj: symbols(obj) for obj in objs}
    owner: dict[str, str] = {}
    for obj, (defined, _) in table.items():
        for sym in defined:
            owner.setdefault(sym, names[obj])
    graph: dict[str, set[str]] = {names[obj]: set() for obj in objs}
    for obj, (_, undefined) in table.items():
        for sym in undefined:
            dep = owner.get(sym)
            if dep is not None and dep != names[obj]:
                graph[names[obj]].add(dep)
    return graph


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each sorted, in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def simple_cycles(graph: dict[str, set[str]], comp: list[str], limit: int = 20) -> list[list[str]]:
    """The elementary cycles inside the strongly connected component `comp`
    (each starting at its smallest file, which is repeated at the end), at
    most `limit` of them: a depth-first walk, fine for a few dozen files."""
    members = set(comp)
    out: list[list[str]] = []

    def walk(start: str, path: list[str]) -> None:
        for w in sorted(graph[path[-1]] & members):
            if len(out) >= limit:
                return
            if w == start:
                out.append([*path, start])
            elif w > start and w not in path:
                walk(start, [*path, w])

    for start in comp:
        walk(start, [start])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("objects", nargs="*", type=Path,
                    help="object files (default: compile csrc/*.c into a temporary folder)")
    ap.add_argument("--src", type=Path, default=CSRC, help="folder of the core sources")
    args = ap.parse_args(argv)
    try:
        if args.objects:
            graph = link_graph(args.objects)
        else:
            sources = sorted(args.src.glob("*.c"))
            if not sources:
                print(f"linkgraph: no .c files in {args.src}", file=sys.stderr)
                return 2
            with tempfile.TemporaryDirectory(prefix="pydb-linkgraph-") as tmp:
                graph = link_graph(compile_objects(sources, Path(tmp)))
    except (RuntimeError, OSError) as e:
        print(f"linkgraph: {e}", file=sys.stderr)
        return 2
    for name in sorted(graph):
        deps = ", ".join(sorted(graph[name])) or "(none)"
        print(f"{name} -> {deps}")
    cyclic = [c for c in components(graph) if len(c) > 1]
    if not cyclic:
        print("no cycle")
        return 0
    for comp in cyclic:
        print(f"knot: {', '.join(comp)} (each reaches the others)")
        for cycle in simple_cycles(graph, comp):
            print("cycle: " + " -> ".join(cycle))
    return 1


if __name__ == "__main__":
    sys.exit(main())
