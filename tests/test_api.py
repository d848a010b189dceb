"""The Python API: errors tree, subfields, records, options, memory."""

import codecs
import copy
import errno
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import pydb
from pydb import parse_subfields
from pydb.unesb import generate

from conftest import SAMPLE, need


def test_error_tree():
    assert issubclass(pydb.CorruptionError, pydb.Error)
    assert issubclass(pydb.NotFoundError, KeyError) and issubclass(pydb.NotFoundError, pydb.Error)
    assert issubclass(pydb.DiskError, OSError)
    assert issubclass(pydb.DatabaseNotFoundError, FileNotFoundError)
    assert issubclass(pydb.UnsupportedError, OSError)
    e = pydb.CorruptionError("x.mst", 100, "bad")
    assert (e.filename, e.offset, e.reason, str(e)) == \
        ("x.mst", 100, "bad", "x.mst at byte 100: bad")


def test_record_access(db_path):
    with pydb.open(db_path) as db:
        r = db[1]
        assert r.mfn == 1 and not r.deleted and r.status == 0
        assert r[70] == ["Smith, J.", "Doe, A."] and r.raw(70) == [b"Smith, J.", b"Doe, A."]
        assert r[999] == [] and r.get(999) is None and r.get(999, "x") == "x"
        assert r.get(70) == "Smith, J." and 70 in r and 71 not in r
        assert r.tags == (24, 70, 70, 26, 245) and len(r) == 5
        assert r.fields[0] == (24, "A title") and r.fields[0].raw == b"A title"
        assert r.to_dict()[70] == ["Smith, J.", "Doe, A."]
        sf = r.subfields(26)[0]
        assert (sf["a"], sf["b"], sf["c"], sf.indicators) == ("Paris", "Unesco", "1965", None)
        marc = r.subfields(245)[0]
        assert marc.indicators == "10" and marc["a"] == "Main title"
        assert marc.getall("a") == ["Main title", "again"]
        with pytest.raises(TypeError):
            r["70"]
        assert r == db.read(1) and r != db[2]
        assert repr(r) == "<pydb.Record mfn=1 fields=5>"
        # Fields built by the binding behave as ones Python builds
        f = r.fields[1]
        same = pydb.Field((70, "Smith, J.", b"Smith, J."))
        assert f == same and type(f) is type(same) and len(f) == 2
        assert (f.tag, f.value, f.raw) == (same.tag, same.value, same.raw)
        assert repr(f) == repr(same) == "pydb.Field(tag=70, value='Smith, J.')"
        assert pickle.loads(pickle.dumps(f)).raw == b"Smith, J."
        tag, value = f
        assert (tag, value) == (70, "Smith, J.") and f[-1] == "Smith, J."


def _read_as(r):
    """Everything a Record says of itself."""
    return (r.mfn, r.deleted, r.status, r.locked, r.new, r.pending, r.offset,
            r.back_offset, r.mfrl, r.encoding, r.tags,
            [(f.tag, f.value, f.raw) for f in r.fields])


def test_records_of_a_real_master_file_pickle_and_copy_as_read():
    """Every record of the lilacs sample (Latin-1, written by CISIS)
    comes back from pickle, copy and deepcopy as it was read: header,
    tags, values and stored bytes (Record.__reduce__; before, TypeError:
    cannot pickle 'Record' object, so no record could go to a worker
    process)."""
    with pydb.open(need(SAMPLE + "lilacs"), encoding="auto") as db:
        n = 0
        for rec in db:
            for back in (pickle.loads(pickle.dumps(rec, protocol)) for protocol in (2, 5)):
                assert type(back) is pydb.Record and back == rec
                assert _read_as(back) == _read_as(rec)
            n += 1
        assert n == 3225 and db.encoding == "latin-1"
        rec = db[1]
        assert _read_as(copy.copy(rec)) == _read_as(copy.deepcopy(rec)) == _read_as(rec)


def test_deleted_records_and_back_versions_pickle(tmp_path):
    with pydb.create(tmp_path / "db", gc="none") as db:
        m = db.append([(10, "Ação"), (20, "x" * 30000)])
        db.update(m, [(10, "new"), (30, "")])
        db.delete(m)
        versions = db.versions(m)
        deleted = next(iter(db.records(deleted=True)))
    assert [v.deleted for v in versions] == [True, False, False]
    assert versions[1].back_offset == versions[2].offset
    assert deleted.deleted and deleted.mfn == m
    for rec in versions + [deleted]:
        back = pickle.loads(pickle.dumps(rec))
        assert _read_as(back) == _read_as(rec)
    assert pickle.loads(pickle.dumps(versions[2]))[20] == ["x" * 30000]


def test_records_go_to_worker_processes(db_path):
    """multiprocessing's workers (spawned: nothing inherited) take
    records as arguments and give them back as results."""
    import multiprocessing
    from operator import methodcaller
    with pydb.open(db_path) as db:
        records = list(db)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(methodcaller("to_dict"), records) == [r.to_dict() for r in records]
        assert pool.map(copy.copy, records) == records


def test_records_are_made_only_by_reading():
    """Record() and Record.__new__ are refused: a Record always owns the
    record it read (one made empty crashed its methods and pickle)."""
    for cls in (pydb.Record, pydb._pydb.Record):
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(TypeError):
            cls.__new__(cls)


def test_record_parts_that_are_not_a_record():
    rebuild = pydb._pydb._record_rebuild
    head = (1, 0, 0, 0, 64, -1, 100, 0, "utf-8", "strict", "x.mst")
    assert rebuild(*head, ((1, b"a"), (65535, b""))).fields == ((1, "a"), (65535, ""))
    for fields, kind in ((((1, "a"),), TypeError), (((1,),), TypeError),
                         (((70000, b"a"),), ValueError), (((-1, b"a"),), OverflowError),
                         ([(1, b"a")], TypeError)):
        with pytest.raises(kind):
            rebuild(*head, fields)
    with pytest.raises(LookupError):
        rebuild(*head[:8], "no-such-codec", "strict", "x.mst", ())
    with pytest.raises(LookupError, match="unknown error handler name 'no-such-handler'"):
        rebuild(*head[:9], "no-such-handler", "x.mst", ())
    with pytest.raises(UnicodeEncodeError):
        rebuild(*head[:9], "\udc80", "x.mst", ())   # not "strict" by default
    with pytest.raises(ValueError, match="embedded null character"):
        rebuild(*head[:9], "strict\0x", "x.mst", ())  # not "strict" either


def test_field_raw_is_the_stored_bytes_whatever_the_decoding(tmp_path):
    """Field.raw is the stored bytes under any codec and error handler.
    A Field whose value is a str of one-byte characters whose codes are
    the bytes (ASCII anywhere, any Latin-1 value) builds raw when asked;
    where decoding changed them into other characters (backslashreplace,
    ignore, a handler that maps a byte to one ASCII character) the Field
    keeps its bytes.  Pickling, copying and writing the Fields back keep
    them too."""
    codecs.register_error("pydb_test_one_char", lambda e: ("?", e.start + 1))
    stored = [b"plain ASCII", b"caf\xe9", b"\xff\xfe", b"", b"\xe9\xe9x"]
    base = tmp_path / "raw"
    with pydb.create(base, "isis-packed") as db:
        db.append([(10 + i, v) for i, v in enumerate(stored)])
    for enc, errors in [("utf-8", "surrogateescape"), ("ascii", "backslashreplace"),
                        ("ascii", "ignore"), ("utf-8", "replace"), ("latin-1", "strict"),
                        ("ascii", "pydb_test_one_char"), ("cp1252", "pydb_test_one_char")]:
        with pydb.open(base, encoding=enc, errors=errors) as db:
            fields = db[1].fields
            assert [f.raw for f in fields] == stored, (enc, errors)
            assert [f.value for f in fields] == [v.decode(enc, errors) for v in stored]
            for f in fields:
                assert pickle.loads(pickle.dumps(f)).raw == f.raw
                assert copy.copy(f).raw == copy.deepcopy(f).raw == f.raw
                if sys.version_info >= (3, 13):   # structseq's __replace__
                    g = copy.replace(f, value="new")
                    assert (g.tag, g.value, g.raw) == (f.tag, "new", f.raw)
                    assert copy.replace(f, raw=b"r").raw == b"r"
                    with pytest.raises(TypeError):
                        copy.replace(f, other=1)
            with pydb.open(base, readonly=False, encoding=enc, errors=errors) as w:
                mfn = w.append(fields)           # Fields: their stored bytes
                assert w[mfn].raw(10) == [b"plain ASCII"]
                assert [f.raw for f in w[mfn].fields] == stored, (enc, errors)


def test_a_field_holds_raw_bytes_only_where_its_value_is_not_them(tmp_path):
    """The hidden raw item (what gc.get_referents shows of a Field) is
    left out where the value's one-byte characters are the stored bytes:
    ASCII values, every Latin-1 value, a cp1252 value whose characters
    are Latin-1's; it is kept for a UTF-8 value past ASCII, a cp1252 value
    with the euro sign (U+20AC, two bytes a character) and an escaped
    byte (a surrogate).  Field.raw is the stored bytes either way."""
    import gc
    stored = [b"plain ASCII", b"caf\xe9 au lait", b"\xe9t\xe9 \x80", b"caf\xc3\xa9"]
    base = tmp_path / "held"
    with pydb.create(base, "isis-packed") as db:
        db.append([(10 + i, v) for i, v in enumerate(stored)])
    want = {"latin-1": [False, False, False, False],
            "cp1252": [False, False, True, False],
            "utf-8": [False, True, True, True]}
    for enc, held in want.items():
        with pydb.open(base, encoding=enc) as db:
            fields = db[1].fields
            assert [f.raw for f in fields] == stored, enc
            assert [any(isinstance(x, bytes) for x in gc.get_referents(f))
                    for f in fields] == held, enc


def test_values_with_one_byte_past_ascii_anywhere(tmp_path):
    """A value decodes as Python decodes its bytes wherever a non-ASCII
    byte sits: ASCII values of 0 to 20 bytes, and each with one byte
    0x80 or 0xE9 at each position (the binding copies ASCII bytes eight
    at a time without the codec: _pydb_record.c, all_ascii), under
    UTF-8, Latin-1, ASCII and cp1252; rec[tag], get() and Field.raw
    agree."""
    stored = []
    for n in range(21):
        plain = bytes(65 + (k * 7) % 26 for k in range(n))
        stored.append(plain)
        for k in range(n):
            for high in (0x80, 0xE9):
                stored.append(plain[:k] + bytes([high]) + plain[k + 1:])
    base = tmp_path / "ascii"
    with pydb.create(base, "isis-packed") as db:
        for i in range(0, len(stored), 100):
            db.append([(1, v) for v in stored[i:i + 100]])
    for enc, errors in [("utf-8", "surrogateescape"), ("latin-1", "strict"),
                        ("ascii", "replace"), ("cp1252", "replace")]:
        got = []
        with pydb.open(base, encoding=enc, errors=errors) as db:
            for rec in db:
                fields = rec.fields
                assert rec[1] == [f.value for f in fields]
                assert rec.get(1) == fields[0].value
                got += [(f.value, f.raw) for f in fields]
        assert got == [(v.decode(enc, errors), v) for v in stored], (enc, errors)
        assert all(value.isascii() == raw.isascii() for value, raw in got
                   if enc != "ascii")


@pytest.mark.sanitize_address
def test_fields_freed_and_made_again_stay_whole(db_path):
    """A GIL build keeps freed Fields for the next ones the binding makes
    (_pydb_record.c, field_free): Fields Python made and Fields records
    made, freed by the thousand and made again, each hold their own tag,
    value and raw, stay untracked by the garbage collector, and the Field
    type's reference count comes back where it was."""
    import gc
    mfns = (1, 2)
    with pydb.open(db_path) as db:
        want = {m: [(f.tag, f.value, f.raw) for f in db[m].fields] for m in mfns}
        before = None   # taken after a first round: caches hold the type
        for _ in range(4):
            made = [pydb.Field((7, "x" * k, b"y" * k)) for k in range(3000)]
            seen = [(f.tag, f.value, f.raw) for f in made[::1000]]
            del made
            got = [(m, db[m].fields) for m in mfns for _ in range(700)]
            tracked = sum(gc.is_tracked(f) for _, fields in got for f in fields)
            seen += [(m, [(f.tag, f.value, f.raw) for f in fields]) for m, fields in got]
            del got   # (no Field in an assert: pytest holds its operands)
            assert seen[:3] == [(7, "x" * k, b"y" * k) for k in (0, 1000, 2000)]
            assert seen[3:] == [(m, want[m]) for m in mfns for _ in range(700)]
            assert tracked == 0
            gc.collect()   # Fields in another test's garbage die now, not mid-round
            now = sys.getrefcount(pydb.Field)   # (not in the assert: pytest
            before = before or now              # would hold the type too)
        assert now == before


def test_fields_in_a_subinterpreter(tmp_path):
    """pydb imported and read in a subinterpreter (sharing the main one's
    GIL, _testcapi.run_in_subinterp), again and again, gives the records
    the main interpreter reads, before and after.  (Only the main
    interpreter's freed Fields are kept for reuse, _pydb_record.c; on
    3.11 every interpreter shares one allocator, so this checks the
    module in a subinterpreter, not that rule.)  The main interpreter's
    kept Records (_pydb_record.c, record_free) are left alone by the
    subinterpreter's import of pydb.Record."""
    testcapi = pytest.importorskip("_testcapi")
    import pickle
    base = generate(tmp_path, count=50)
    out = tmp_path / "sub.pickle"
    with pydb.open(base) as db:
        want = [[(f.tag, f.value, f.raw) for f in r.fields] for r in db]
    code = (f"import sys; sys.path.insert(0, {str(Path(pydb.__file__).parents[1])!r})\n"
            "import pickle, pydb\n"
            f"with pydb.open({str(base)!r}) as db:\n"
            "    for _ in range(20):\n"
            "        got = [[(f.tag, f.value, f.raw) for f in r.fields] for r in db]\n"
            f"open({str(out)!r}, 'wb').write(pickle.dumps(got))\n")
    kept = pydb._pydb._testing.records_kept   # the main interpreter's Records
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    for _ in range(3):
        with pydb.open(base) as db:
            batch = list(db)
        del batch
        before = kept()
        assert testcapi.run_in_subinterp(code) == 0
        assert pickle.loads(out.read_bytes()) == want
        # the subinterpreter's import set its own record class: the main
        # interpreter's kept Records stay kept, for its class
        assert kept() == before and before[1] is gil and (before[0] >= 50) is gil
        with pydb.open(base) as db:
            assert [[(f.tag, f.value, f.raw) for f in r.fields] for r in db] == want


def _run_under_debug_malloc(code: str) -> str:
    """Run `code` in a child Python under CPython's debug allocator (which
    aborts on a block freed twice or written after its free); its stdout,
    after checking that it exited cleanly with nothing on stderr."""
    env = dict(os.environ, PYTHONMALLOC="debug",
               PYTHONPATH=str(Path(pydb.__file__).parents[1]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    return proc.stdout


def test_freed_fields_freed_at_exit(tmp_path):
    """At the interpreter's exit the module frees the Fields it kept for
    reuse (_pydb_record.c, record_clear): the list, full after a scan
    (none on a free-threaded build), is empty and serves no type after
    the module's clear, and stays so while Fields are made and freed; a
    process that filled the list exits cleanly under CPython's debug
    allocator, which aborts on a block freed twice or written after its
    free."""
    base = generate(tmp_path, count=600)
    code = ("import pydb\n"
            "from pydb._pydb import _testing\n"
            f"with pydb.open({str(base)!r}) as db:\n"
            "    kept = [r.fields for r in db]\n"
            "    n = sum(map(len, kept))\n"
            "    del kept\n"
            "    full = _testing.field_free_list()\n"
            "    cleared = _testing.field_free_list(True)\n"
            "    again = [[(f.tag, f.value, f.raw) for f in r.fields] for r in db]\n"
            "    after = _testing.field_free_list()\n"
            "    ok = again == [[(f.tag, f.value, f.raw) for f in r.fields] for r in db]\n"
            "print(n, full, cleared, after, ok)\n")
    n, rest = _run_under_debug_malloc(code).split(" ", 1)
    assert int(n) > 2048   # more than the list keeps
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    full = (2048, True) if gil else (0, False)   # no list without the GIL
    # kept, then cleared as at exit: no Field goes on a list that serves
    # no type any more, and Fields made afterwards are whole
    assert rest.split() == [f"({full[0]},", f"{full[1]})", "(0,", "False)", "(0,", "False)",
                            "True"]


def test_fields_made_by_reads_are_not_counted_by_the_collector(tmp_path):
    """Fields, never tracked by the cyclic collector, are not counted
    among its allocations either (_pydb_record.c, field_presize): making
    5,000 new ones adds at most a few objects to the count that starts a
    collection (it added one per Field not taken from the free list, and
    so ran collections with nothing to collect); they read as Fields
    Python makes do, and a free-threaded build, which keeps no header
    before them, is left as it was.  A Field Python makes is counted and
    tracked, and goes back through the collector."""
    import gc
    base = tmp_path / "many"
    values = [f"value number {i:05d} of a long field" for i in range(5000)]
    with pydb.create(base, "ffi-packed") as db:
        db.append([(1 + i % 7, v) for i, v in enumerate(values)])
    with pydb.open(base) as db:
        rec = db[1]
        gc.collect()
        gc.disable()
        try:
            before = gc.get_count()[0]
            fields = rec.fields
            added = gc.get_count()[0] - before
        finally:
            gc.enable()
    assert [f.value for f in fields] == values
    assert not any(gc.is_tracked(f) for f in fields)
    assert {sys.getsizeof(f) for f in fields} == {sys.getsizeof(pydb.Field((1, "x")))}
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        assert 0 <= added <= 5, added
    del fields   # freed through the free list and PyObject_Free
    # Fields Python makes are counted when made and taken off the count
    # when freed (freed as the reads' are, 10,000 added 10,002 to it)
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        for i in range(10_000):
            made = pydb.Field((i, "x"))
            assert gc.is_tracked(made)
        del made
        added = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert 0 <= added <= 5, added


def test_record_blocks_kept_for_reuse(tmp_path):
    """A freed Record's block is kept for the next read (_pydb_record.c,
    "Record memory"): a scan leaves at most 256 kept, none over 4096
    bytes; reads by key, by batch and by iteration through kept blocks
    give the stored fields; a block grown past 4096 bytes is freed, not
    kept; a small record read into a large kept block cuts it to its
    size (csrc/record.c, pydb__record_reserve: a held Record holds at
    most twice its memory); the module's clear frees the kept blocks and
    keeps none after (a free-threaded build keeps none).  In a child
    process, under CPython's debug allocator."""
    base = generate(tmp_path, count=600)
    with pydb.open(base, readonly=False) as db, db.transaction() as tx:
        big = tx.append([(10, b"b" * 6000)])
        mid = tx.append([(10, b"m" * 3000)])
        small = tx.append([(10, b"s")])
    code = ("import pydb\n"
            "from pydb._pydb import _testing as t\n"
            "def fields(recs): return [[(f.tag, f.value, f.raw) for f in r.fields] "
            "for r in recs]\n"
            f"with pydb.open({str(base)!r}) as db:\n"
            "    n = len(db)\n"
            "    want = fields(db)\n"
            "    after_scan = t.record_spares()\n"
            "    same = (fields(db) == want, fields(db.read_many(range(1, n + 1))) == want,\n"
            "            fields(db[m] for m in range(1, n + 1)) == want)\n"
            "    before = len(t.record_spares())\n"
            f"    r = db[{big}]; del r\n"
            "    after_big = t.record_spares()\n"
            f"    r = db[{mid}]; del r\n"
            "    after_mid = t.record_spares()\n"
            f"    r = db[{small}]; small = [tuple(f) for f in r.fields]; del r\n"
            "    after_small = t.record_spares()\n"
            "    t.field_free_list(True)\n"
            "    cleared = t.record_spares()\n"
            "    again = fields(db) == want\n"
            "print(repr((n, after_scan, same, before, after_big, after_mid, after_small,\n"
            "            small, cleared, again, t.record_spares())))\n")
    (n, after_scan, same, before, after_big, after_mid, after_small, small, cleared,
     again, end) = eval(_run_under_debug_malloc(code))
    assert n == 603 and same == (True, True, True) and again
    assert small == [(10, "s")]
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        assert after_scan == after_big == after_mid == after_small == cleared == end == []
        return
    assert 1 <= len(after_scan) <= 256 and max(after_scan) <= 4096
    # the 6000-byte record took a kept block and grew it: not kept again
    assert len(after_big) == before - 1 and max(after_big) <= 4096
    # the 3000-byte one took a block and went back on top, grown; the
    # 1-byte record then took that block and cut it to its size: the
    # 72-byte pydb_record, its 26 bytes (isis-packed leader, one
    # directory entry, the value) rounded to 32, one 16-byte field entry
    assert len(after_mid) == len(after_big) and 3000 < after_mid[-1] <= 4096
    assert after_small[:-1] == after_mid[:-1] and after_small[-1] == 72 + 32 + 16
    assert cleared == [] and end == []   # the clear frees them, none kept after


def test_encodings(db_path):
    with pydb.open(db_path) as db:   # utf-8 with surrogateescape: lossless
        v = db[2][99][0]
        assert db[2][24] == ["café"] and v.encode("utf-8", "surrogateescape") == b"\xff\xfe"
    with pydb.open(db_path, encoding="latin-1") as db:
        assert db[2][24] == ["cafÃ©"] and db[2].encoding == "latin-1"
    with pydb.open(db_path, errors="strict") as db:
        with pytest.raises(UnicodeDecodeError):
            db[2][99]
        assert db[2].raw(99) == [b"\xff\xfe"]
    with pytest.raises(LookupError):
        pydb.open(db_path, encoding="no-such-codec")


def test_subfield_parsing():
    s = parse_subfields("^aParis^bUnesco^c-1965")
    assert dict(s) == {"a": "Paris", "b": "Unesco", "c": "-1965"} and s.text == ""
    s = parse_subfields("Plain text")
    assert len(s) == 0 and s.text == "Plain text" and s.indicators is None
    s = parse_subfields("#1^AUpper^")
    assert s.indicators == "#1" and s["a"] == "Upper" and s["A"] == "Upper"
    s = parse_subfields("Lead^aX")
    assert s.text == "Lead" and s.indicators is None
    s = parse_subfields("\x1fanew\x1fbsub", delimiter="\x1f")
    assert s["a"] == "new" and s["b"] == "sub"


def test_not_found_and_bad_arguments(db_path):
    with pydb.open(db_path) as db:
        for mfn in (0, -1, 3, 2 ** 40):
            with pytest.raises(pydb.NotFoundError):
                db[mfn]
            assert mfn not in db and db.get(mfn) is None
        with pytest.raises(TypeError):
            db["1"]
        with pytest.raises(pydb.NotFoundError):
            db.read_many([1, 2, 3])
        assert [r.mfn for r in db.read_many([2, 1, 2])] == [2, 1, 2]
        assert db.read_many([]) == []
    for kw in ({"io": "async"}, {"lock": "spin"}):
        with pytest.raises(ValueError):
            pydb.open(db_path, **kw)
    with pydb.open(db_path, readonly=False, encoding="utf-8") as db:   # writing is supported
        assert not db.readonly and db.sync
    with pydb.open(db_path) as db:
        assert db.readonly
        with pytest.raises(pydb.ReadOnlyError):
            db.append([(1, "x")])


def test_missing_files(tmp_path):
    with pytest.raises(pydb.DatabaseNotFoundError) as e:
        pydb.open(tmp_path / "nothing")
    assert e.value.errno == errno.ENOENT and e.value.filename.endswith("nothing.mst")
    (tmp_path / "half.mst").write_bytes(b"\0" * 512)
    with pytest.raises(pydb.DatabaseNotFoundError, match=r"\.xrf"):
        pydb.open(tmp_path / "half.MST")


def test_paths_and_case(db_path, tmp_path):
    for p in (db_path, str(db_path) + ".mst", str(db_path) + ".xrf", os.fsencode(db_path)):
        with pydb.open(p) as db:
            assert db.max_mfn == 2
    for name in ("t.mst", "t.xrf"):
        (tmp_path / name.upper()).write_bytes((db_path.parent / name).read_bytes())
    with pydb.open(tmp_path / "t") as db:      # finds T.MST / T.XRF
        assert db[1][24] == ["A title"]


def test_close(db_path):
    db = pydb.open(db_path)
    it = iter(db)
    db.close()
    db.close()
    assert db.closed and "closed" in repr(db)
    for op in (lambda: db[1], lambda: len(db), lambda: list(it), lambda: db.read_many([1]),
               lambda: db.max_mfn, db.counts):
        with pytest.raises(pydb.ClosedError):
            op()


def test_info(db_path):
    with pydb.open(db_path, io="pread", lock="mutex") as db:
        info = db.info()
        assert (info["layout"], info["io"], info["lock"], info["next_mfn"]) == \
            ("isis-aligned", "pread", "mutex", 3)
        assert db.xrf_entry(1)["state"] == "active" and db.xrf_entry(1)["new"] is True


def test_memory_does_not_grow_with_database_size(tmp_path):
    """Opening reads the control record and XRF on demand: RSS after opening
    and iterating a 20,000-record database with io=pread stays flat."""
    base = generate(tmp_path, count=20000)
    code = f"""
import resource, pydb
def rss(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
before = rss()
db = pydb.open({str(base)!r}, io="pread")
n = 0
for rec in db:
    n += 1
after = rss()
print(n, after - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    n, grew_kib = map(int, out.stdout.split())
    size_kib = base.with_suffix(".mst").stat().st_size // 1024
    assert n == 20000
    assert grew_kib < 2048 and grew_kib < size_kib // 2, (grew_kib, size_kib)


def test_iteration_stops_with_closed_error_after_close(isis_data):
    db = pydb.open(isis_data / "scieloorg__pyisis/pyisis/pyisis/sample/cds")
    it = iter(db)
    assert next(it).mfn == 1
    db.close()
    with pytest.raises(pydb.ClosedError):
        next(it)




def test_create_refuses_a_database_whose_files_differ_in_case(tmp_path):
    """create("x/cds") beside an existing x/Cds.Mst is refused, as the
    core would open those files for "x/cds" (names match in any case)."""
    pydb.create(tmp_path / "Cds").close()
    (tmp_path / "Cds.mst").rename(tmp_path / "Cds.Mst")
    (tmp_path / "Cds.xrf").rename(tmp_path / "Cds.Xrf")
    with pytest.raises(pydb.DatabaseExistsError):
        pydb.create(tmp_path / "cds")


def test_a_directory_where_the_master_file_should_be_is_named_so(tmp_path):
    """A folder named x.mst (or x.xrf) is not taken for a missing file:
    the error says what is there (it said "no master file")."""
    (tmp_path / "x.mst").mkdir()
    with pytest.raises(pydb.DiskError) as e:
        pydb.open(tmp_path / "x")
    assert e.value.errno == errno.EISDIR and e.value.filename == str(tmp_path / "x.mst")
    assert "the master file (.mst) of database" in str(e.value)
    assert "is a directory" in str(e.value)
    assert not isinstance(e.value, pydb.DatabaseNotFoundError)
    (tmp_path / "y.mst").write_bytes(b"")
    os.mkfifo(tmp_path / "y.xrf")
    with pytest.raises(pydb.DiskError, match="is not a regular file") as e:
        pydb.open(tmp_path / "y")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(pydb.DatabaseNotFoundError):
        pydb.open(tmp_path / "z")
