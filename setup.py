"""Build pydb: the extension module pydb._pydb (binding + C core) and the
pure-C benchmark pydb-crashtest, installed inside the package.

Environment switches (docs/conventions.md §9):
  PYDB_SANITIZE=address   build with -fsanitize=address,undefined
  PYDB_SANITIZE=thread    build with -fsanitize=thread
  PYDB_DEBUG=1            -DPYDB_DEBUG: PYDB_ASSERT checks on (csrc/util.h);
                          -O0 -g, or -O1 -g with a sanitizer (its speed)
"""

import glob
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CORE = sorted(glob.glob("csrc/*.c"))
CFLAGS = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-fvisibility=hidden"]
LDFLAGS = ["-pthread"]

sanitize = os.environ.get("PYDB_SANITIZE", "")
if sanitize == "address":
    CFLAGS += ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
               "-fno-omit-frame-pointer"]
    LDFLAGS += ["-fsanitize=address,undefined"]
elif sanitize == "thread":
    CFLAGS += ["-fsanitize=thread", "-fno-omit-frame-pointer"]
    LDFLAGS += ["-fsanitize=thread"]
elif sanitize:
    sys.exit(f"PYDB_SANITIZE must be 'address' or 'thread', not {sanitize!r}")
if os.environ.get("PYDB_DEBUG"):
    CFLAGS += ["-O1" if sanitize else "-O0", "-g", "-UNDEBUG", "-DPYDB_DEBUG"]
else:
    CFLAGS += ["-O2"]


class BuildWithCrashtest(build_ext):
    """build_ext that also links benchmarks/crashtest.c against the core
    into <package>/pydb-crashtest, and also puts both into the source
    tree's pydb/ (see copy_into_checkout)."""

    def run(self):
        super().run()
        crashtest = self.build_crashtest()
        if not self.inplace:
            self.copy_into_checkout([self.get_ext_fullpath(e.name)
                                     for e in self.extensions] + [crashtest])

    def copy_into_checkout(self, built):
        """`pip install .`: copy the extension and pydb-crashtest just built
        from these sources into the source tree's pydb/ as well.
        `python -m pydb` started in the source tree imports ./pydb before
        the installed copy, and so runs this build of these sources; a
        source tree with no build at all stops at import with a message
        saying how to build (pydb/_checkout.py, which calls any folder with
        setup.py beside pydb/ a source tree, as this does)."""
        here = os.path.dirname(os.path.abspath(__file__))
        for path in built:
            shutil.copy2(path, os.path.join(here, "pydb", os.path.basename(path)))

    def build_crashtest(self):
        cc = self.compiler
        objects = cc.compile(CORE + ["benchmarks/crashtest.c"],
                             output_dir=self.build_temp,
                             include_dirs=["csrc"], extra_postargs=CFLAGS)
        if self.inplace:
            out_dir = "pydb"
        else:
            out_dir = os.path.join(self.build_lib, "pydb")
        os.makedirs(out_dir, exist_ok=True)
        cc.link_executable(objects, "pydb-crashtest", output_dir=out_dir,
                           extra_postargs=LDFLAGS)
        return os.path.join(out_dir, "pydb-crashtest")


setup(
    ext_modules=[Extension(
        "pydb._pydb",
        sources=sorted(glob.glob("pydb/_pydb*.c")) + CORE,
        include_dirs=["csrc"],
        extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS,
        depends=glob.glob("csrc/*.h") + glob.glob("pydb/_pydb*.h"),
    )],
    cmdclass={"build_ext": BuildWithCrashtest},
)
