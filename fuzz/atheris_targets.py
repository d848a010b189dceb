"""atheris targets: the parsers of outside input written in Python
(docs/fuzzing.md): the tolerant ISO 2709 reader (pydb/iso2709.py, with the
C fast path pydb_iso_strict through the binding) and the JSON Lines reader
(pydb/jsonl.py).

    python fuzz/atheris_targets.py iso2709|jsonl [libFuzzer options] [CORPUS...]

(pip install atheris).  A finding is any exception other than the
documented pydb.IsoRecordError (with on_error="stop"), or a record that
breaks the reader's promises: fields of (int or str tag, bytes value),
numbers counting up from 1, offsets inside the input and rising.  Seeds:
fuzz/make_seeds.py's iso2709 corpus, JSON Lines exports (make_seeds.py
writes them into <out>/jsonl).
"""
from __future__ import annotations

import io
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def check_records(records, size: int) -> None:
    last_number, last_offset = 0, -1
    for rec in records:
        assert rec.number > last_number, (rec.number, last_number)
        assert last_offset < rec.offset < size, (rec.offset, last_offset, size)
        last_number, last_offset = rec.number, rec.offset
        for tag, value in rec.fields:
            assert isinstance(tag, (int, str)), tag
            assert isinstance(value, bytes), value
        assert rec.mfn is None or 0 < rec.mfn < 2**31, rec.mfn


def one_iso2709(data: bytes) -> None:
    import pydb
    from pydb import iso2709

    for flavour in ("auto", "isis", "marc"):
        reader = iso2709.read(io.BytesIO(data), flavour)
        check_records(reader, len(data))
        for e in reader.errors:
            assert isinstance(e, pydb.IsoRecordError), e
        try:
            check_records(iso2709.read(io.BytesIO(data), flavour, on_error="stop"),
                          len(data))
        except pydb.IsoRecordError:
            pass


def one_jsonl(data: bytes) -> None:
    import pydb
    from pydb.jsonl import read_jsonl

    errors: list = []
    check_records(read_jsonl(io.BytesIO(data), errors=errors), len(data))
    for e in errors:
        assert isinstance(e, pydb.IsoRecordError), e
    try:
        check_records(read_jsonl(io.BytesIO(data), on_error="stop"), len(data))
    except pydb.IsoRecordError:
        pass


TARGETS = {"iso2709": one_iso2709, "jsonl": one_jsonl}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(TARGETS)} [libFuzzer options] [CORPUS...]")
    target = TARGETS[sys.argv.pop(1)]
    sys.path.insert(0, str(REPO))
    import atheris

    with atheris.instrument_imports(include=["pydb"]):
        import pydb  # noqa: F401
        import pydb.iso2709  # noqa: F401
        import pydb.jsonl  # noqa: F401
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
