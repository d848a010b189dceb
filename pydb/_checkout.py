"""Import-time check that a source checkout runs its own build of the C
extension ``pydb._pydb``.

A source checkout is a ``pydb/`` folder with ``setup.py`` beside it.  If
the extension is not built there for the running Python, importing pydb
stops with an ImportError that says how to build it, rather than running
another copy of pydb (an editable install's import hook, or an older
build, can offer one from elsewhere).  An installed package, or a build
that fails to load, keeps its own error.  Imported first by
``pydb/__init__.py``.
"""

import importlib.machinery
import os

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
_checkout = os.path.isfile(os.path.join(_root, "setup.py"))

BUILD_HINT = (
    f"pydb is imported from the source checkout {_root}, where the C "
    "extension pydb._pydb is not built for this Python.  Build it there "
    "with `pip install -e .` (editable install) or `python setup.py "
    "build_ext --inplace`, or run from another directory to use an "
    "installed pydb.")

try:
    from . import _pydb
except ImportError as e:
    _built = [n for n in os.listdir(_here) if n.startswith("_pydb.")
              and n.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))]
    if not _checkout or _built:
        raise
    raise ImportError(BUILD_HINT, name="pydb._pydb") from e

if _checkout and os.path.dirname(os.path.abspath(_pydb.__file__ or "")) != _here:
    raise ImportError(f"{BUILD_HINT}  (The only build found is {_pydb.__file__}.)",
                      name="pydb._pydb")
