"""Regression inputs of the fuzz targets: every crash, hang or leak the fuzzers
found, rebuilt by a generator function (docs/fuzzing.md), never kept as a
binary file.

    python fuzz/regressions.py [--out DIR]      (default fuzz/build/regressions)

writes DIR/<target>/<case name>.  tests/test_fuzz.py replays each through
the target's standalone build with PYDB_FUZZ_VERBOSE=1 and checks the exact
outcome the fix gives: `expect` is text that must appear in the errors the
target prints, or "" for an input that must now give no error at all.
The same inputs are checked through the Python API in tests/test_fuzz.py.
"""
from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEP = b"#PYDB-FUZZ-FILE#"          # FUZZ_SEP of fuzz/fuzz.h

# The commit header (csrc/shm.h): the generation word, the latest commit
# and the state slots.
SHM_LATEST = 24
SHM_STATE = 64
SHM_STATE_SIZE = 128
SHM_STATE_FILE_GEN = 56
SHM_STATE_CRC = 120
SHM_FILE_GEN_WORD = 336


@dataclass(frozen=True)
class Case:
    name: str                      # file name of the input
    target: str                    # fuzz target (fuzz/fuzz_<target>.c)
    expect: str                    # text in the printed errors; "": no error
    make: Callable[[], bytes]      # builds the input
    found: str                     # what the fuzzer found, and the fix


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as csrc/util.c computes it."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def small_database(tmp: Path) -> tuple[bytes, bytes, bytes]:
    """.mst, .xrf and .shm of a 3-record database pydb wrote (one commit
    per record, so the header holds a published state)."""
    sys.path.insert(0, str(REPO))
    import pydb

    base = tmp / "db"
    with pydb.create(base, layout="isis-aligned") as db:
        for i in range(1, 4):
            db.append([(24, f"Record {i} on water"), (70, "Smith, J.")])
    return tuple(base.with_suffix(e).read_bytes()   # type: ignore[return-value]
                 for e in (".mst", ".xrf", ".shm"))


def shm_word_ahead() -> bytes:
    """The generation word of the commit header (offset 336) ahead of the
    latest state's master-file generation (the fuzzer's input had
    0xc3c3c3c3c3c3c3c3 there)."""
    with tempfile.TemporaryDirectory() as t:
        mst, xrf, shm = small_database(Path(t))
    b = bytearray(shm)
    struct.pack_into("<Q", b, SHM_FILE_GEN_WORD, 0xC3C3C3C3C3C3C3C3)
    return SEP.join([mst, xrf, b"", bytes(b)])


def shm_state_gen_huge() -> bytes:
    """The latest state itself (with a valid CRC) naming master-file
    generation 2^63 + 1, which no handle's files can be."""
    with tempfile.TemporaryDirectory() as t:
        mst, xrf, shm = small_database(Path(t))
    return SEP.join([mst, xrf, b"", bytes(set_state_gen(shm, (1 << 63) + 1))])


def set_state_gen(shm: bytes, gen: int) -> bytearray:
    """shm with the latest state's file_gen (and the word) set to gen and
    the state's CRC recomputed."""
    b = bytearray(shm)
    latest = struct.unpack_from("<Q", b, SHM_LATEST)[0]
    off = SHM_STATE + (latest % 2) * SHM_STATE_SIZE
    struct.pack_into("<Q", b, off + SHM_STATE_FILE_GEN, gen)
    struct.pack_into("<I", b, off + SHM_STATE_CRC, crc32c(bytes(b[off:off + SHM_STATE_CRC])))
    struct.pack_into("<Q", b, SHM_FILE_GEN_WORD, gen)
    return b


def stopwords_lone_cr() -> bytes:
    """Stop words ended by CR alone (and a DOS end-of-file mark): more words
    than lines ending in LF (the fuzzer's input mixed CR LF and lone CR)."""
    words = b"\r".join(b"W%d" % i for i in range(40)) + b"\x1aLAST"
    return SEP.join([b"", b"", words])


CASES = [
    Case("shm-word-ahead", "mst", "", shm_word_ahead,
         "hang: every read switched files forever (read.c pydb__header_gen "
         "took the word over the state); now the state decides"),
    Case("shm-state-gen-2e63", "mst", "", shm_state_gen_huge,
         "hang (the same loop, found reading the code of the case above: a "
         "generation the handle's fseq cannot hold); "
         "now shm.c takes a generation >= 2^62 for a damaged slot and reads "
         "use the files (files mode), as for a slot with a bad CRC"),
    Case("stw-lone-cr", "keys", "", stopwords_lone_cr,
         "heap-buffer-overflow in pydb__stopwords_parse (keys.c): words "
         "counted by LF, split at CR and 0x1A too; now counted alike"),
]


def write(out: Path) -> list[Path]:
    paths = []
    for c in CASES:
        d = out / c.target
        d.mkdir(parents=True, exist_ok=True)
        p = d / c.name
        p.write_bytes(c.make())
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "fuzz" / "build" / "regressions")
    args = ap.parse_args(argv)
    for p in write(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
