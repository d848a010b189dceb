"""The Fields a database's codec keeps for short values
(pydb/_pydb_record.c, "Fields seen"): Record.fields hands out again the
Field it made for a (tag, value) of at most 16 bytes seen twice in a row
at that value's slot, instead of decoding the value again; and records
are not tracked by the cycle collector when their class can hold no
cycle (record_class_atomic)."""

from __future__ import annotations

import gc
import sys
import sysconfig
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pydb
from pydb import _pydb

from conftest import build_db

#: A free-threaded build keeps no table: values read back the same, and
#: no Field is shared.
SHARES = not sysconfig.get_config_var("Py_GIL_DISABLED")


def _fields(db):
    """Every record's fields, read once (tuples of Field, kept)."""
    return [rec.fields for rec in db]


@pytest.mark.sanitize_address
def test_a_short_value_seen_twice_is_one_field_from_then_on(tmp_path):
    """Three records with the same fields: the first record's Fields are
    new, the second's are admitted to the table, the third gets the
    second's (the same objects) for values of up to 16 bytes, under
    UTF-8 a non-ASCII one too; a 17-byte value is never shared."""
    fields = [(40, b"en"), (41, b"x" * 16), (42, b"x" * 17), (43, b"caf\xc3\xa9"),
              (44, b""), (45, b"\x00")]
    base = build_db(tmp_path / "s", "isis-packed", [fields] * 3)
    with pydb.open(base) as db:
        one, two, three = _fields(db)
    assert [(f.tag, f.raw) for f in three] == fields
    assert [f.value for f in three] == ["en", "x" * 16, "x" * 17, "café", "", "\x00"]
    assert [a is b for a, b in zip(one, two, strict=True)] == [False] * 6
    shared = [a is b for a, b in zip(two, three, strict=True)]
    assert shared == [SHARES, SHARES, False, SHARES, SHARES, SHARES]


@pytest.mark.sanitize_address
def test_the_tag_and_every_byte_and_the_length_tell_values_apart(tmp_path):
    """Values alike but for one byte, their length (trailing NULs) or
    their tag, each read many times: every Field is that field's.  The
    lengths 0 to 16 cover each way the key takes the bytes in (one to
    three bytes, four to seven, eight to sixteen)."""
    fields = []
    for n in range(0, 17):
        base_value = bytes(range(65, 65 + n))
        fields.append((10, base_value))
        fields.append((11, base_value))                  # another tag
        fields.append((10, base_value + b"\x00"))        # one byte longer
        if n:
            for i in range(n):                           # each byte changed
                fields.append((10, base_value[:i] + b"!" + base_value[i + 1:]))
    base = build_db(tmp_path / "k", "isis-packed", [fields] * 4)
    with pydb.open(base) as db:
        for rec in _fields(db):
            assert [(f.tag, f.raw) for f in rec] == fields
            assert [f.value for f in rec] == [v.decode() for _, v in fields]


def _same_slot(groups):
    """The first two (tag, value) of one group of `groups` (iterables of
    (tag, value)) that take the same slot of the table
    (_testing.fields_seen_slot)."""
    for group in groups:
        seen = {}
        for tag, value in group:
            slot = _pydb._testing.fields_seen_slot(tag, value)
            if slot in seen:
                return seen[slot], (tag, value)
            seen[slot] = (tag, value)
    raise AssertionError("no two candidates of a group share a slot")


@pytest.mark.sanitize_address
def test_a_slot_held_by_another_tag_or_length_is_a_miss(tmp_path):
    """A field whose slot holds a Field of the same bytes under another
    tag, or of a value whose two words are the same but whose length is
    not (one byte repeated: "aaaa" and "aaaaa" load the same words), gets
    a Field of its own."""
    tags = _same_slot([[(t, b"value") for t in range(1, 65536)]])
    runs = _same_slot([(t, bytes([c]) * n) for n in lengths]
                      for t in range(1, 1000) for c in range(32, 127)
                      for lengths in (range(4, 8), range(8, 17)))
    assert tags[0][1] == tags[1][1] and tags[0][0] != tags[1][0]
    assert runs[0][0] == runs[1][0] and runs[0][1][0] == runs[1][1][0]
    assert len(runs[0][1]) != len(runs[1][1])
    assert _pydb._testing.fields_seen_slot(1, b"x" * 17) is None
    for first, second in (tags, runs):
        base = build_db(tmp_path / f"c{first[0]}-{len(first[1])}", "isis-packed",
                        [[first], [first], [first], [second], [second], [second]])
        with pydb.open(base) as db:
            got = [rec.fields[0] for rec in db]
        assert [(f.tag, f.raw) for f in got] == [first] * 3 + [second] * 3
        assert (got[2] is got[1], got[5] is got[4], got[4] is got[1]) == (SHARES, SHARES, False)


@pytest.mark.sanitize_address
def test_a_tag_whose_values_do_not_repeat_is_looked_up_again_only_now_and_then(tmp_path):
    """200 records whose author (70) is new each time, then 300 whose
    author is always the same, each with the same language (40).  The
    author's tag stops being looked up after the run of new values: the
    same author is read as Fields of its own for a while (with every tag
    looked up, all but the first two would be one Field), until a
    look-up now and then finds that its values repeat and it is shared
    again.  The language is shared throughout, and every value reads
    back as written."""
    records = [[(70, f"Name{i}".encode()), (40, b"en")] for i in range(200)]
    records += [[(70, b"Same, A."), (40, b"en")]] * 300
    base = build_db(tmp_path / "t", "isis-packed", records)
    with pydb.open(base) as db:
        got = _fields(db)
    assert [[(f.tag, f.raw) for f in rec] for rec in got] == records
    language = {id(rec[1]) for rec in got[2:]}
    same = [rec[0] for rec in got[200:]]
    assert len(language) == (1 if SHARES else 498)
    assert len({id(f) for f in same[:100]}) > 10
    assert len({id(f) for f in same[-100:]}) == (1 if SHARES else 100)


def test_more_values_than_slots_read_back_whole(tmp_path):
    """5,000 distinct short values, then the same again in another order,
    three times over: slots are taken over again and again (1,024 slots)
    and every Field still has its own tag, value and bytes."""
    values = [(1 + i % 7, f"v{i}".encode()) for i in range(5000)]
    records = [values[i:i + 50] for i in range(0, 5000, 50)]
    records += [list(reversed(r)) for r in reversed(records)]
    base = build_db(tmp_path / "m", "isis-packed", records * 3)
    with pydb.open(base) as db:
        got = [[(f.tag, f.raw, f.value) for f in rec] for rec in _fields(db)]
    assert got == [[(t, v, v.decode()) for t, v in r] for r in records * 3]


def test_fields_are_shared_only_under_the_same_codec(tmp_path):
    """One file read through three handles at once: UTF-8 with
    surrogateescape, Latin-1, and UTF-8 strict.  Each decodes every value
    its own way on every read, and the strict handle raises for the bad
    bytes each time (a value that failed to decode is never kept)."""
    fields = [(24, b"caf\xc3\xa9"), (99, b"\xff\xfe")]
    base = build_db(tmp_path / "c", "isis-packed", [fields] * 4)
    with pydb.open(base) as utf8, pydb.open(base, encoding="latin-1") as latin1, \
            pydb.open(base, errors="strict") as strict:
        for _ in range(3):
            for a, b in zip(_fields(utf8), _fields(latin1), strict=True):
                assert [f.value for f in a] == ["café", "\udcff\udcfe"]
                assert [f.value for f in b] == ["cafÃ©", "ÿþ"]
            for mfn in range(1, 5):
                assert strict[mfn][24] == ["café"]
                with pytest.raises(UnicodeDecodeError):
                    _ = strict[mfn].fields


@pytest.mark.sanitize_address
def test_records_outlive_their_database_and_its_table(tmp_path):
    """A record holds its codec's table: after the database is closed and
    gone, its records' fields still read, shared as before.  When the last
    record goes, the table goes and gives back the Fields it held: a
    shared Field then has exactly one reference fewer."""
    base = build_db(tmp_path / "o", "isis-packed", [[(5, b"same"), (6, b"\xe9t\xe9")]] * 3)
    with pydb.open(base, encoding="latin-1") as db:
        recs = list(db)
    del db
    gc.collect()
    got = [rec.fields for rec in recs]
    assert [[(f.tag, f.value, f.raw) for f in r] for r in got] == \
        [[(5, "same", b"same"), (6, "été", b"\xe9t\xe9")]] * 3
    assert (got[2][0] is got[1][0], got[2][1] is got[1][1]) == (SHARES, SHARES)
    kept = got[2][1]
    del got
    held = sys.getrefcount(kept)
    del recs
    gc.collect()
    assert sys.getrefcount(kept) == held - SHARES   # the table's reference
    assert (kept.tag, kept.value, kept.raw) == (6, "été", b"\xe9t\xe9")


values = st.binary(min_size=0, max_size=20).map(lambda b: bytes(x % 4 + 0x61 if x < 200 else x
                                                                 for x in b))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.lists(st.tuples(st.integers(1, 5), values), min_size=0,
                                 max_size=12), min_size=1, max_size=30),
       encoding=st.sampled_from(["utf-8", "latin-1", "cp850", "cp1252"]))
def test_fields_read_back_as_written_model(tmp_path_factory, records, encoding):
    """Records of short values from a small alphabet (so that values and
    slots repeat) and some high bytes, under four codecs: three reads of
    every record give the written tags and bytes, and each value is its
    bytes decoded by Python's codec with the handle's error handler."""
    base = build_db(tmp_path_factory.mktemp("h") / "h", "isis-packed", records)
    errors = "replace" if encoding == "cp1252" else "surrogateescape"
    want = [[(t, v, v.decode(encoding, errors)) for t, v in r] for r in records]
    with pydb.open(base, encoding=encoding, errors=errors) as db:
        for _ in range(3):
            assert [[(f.tag, f.raw, f.value) for f in rec] for rec in _fields(db)] == want


class _Held:
    """An object a record's cycle holds, whose weak reference tells that
    the cycle was collected."""


def test_records_are_untracked_only_where_the_module_says_so(tmp_path):
    """pydb.Record's instances are not tracked by the cycle collector
    (pydb/database.py asks for it: the class adds no __dict__ and no slot
    and lives as long as the module).  Another record class keeps its
    instances tracked, and a record in a cycle through it is collected:
    through a __dict__, a slot, or the class itself (a record stored as
    an attribute of its class).  Untracked instances of a class that adds
    a __dict__ or a slot are refused.

    The cycle holds an object of its own, whose weak reference says it was
    collected: the class is no witness on the free-threaded CPython 3.13,
    which makes every class created after a thread first started immortal
    (so a cycle through the class itself is never collected there)."""
    base = build_db(tmp_path / "g", "isis-packed", [[(1, b"a")]] * 2)

    def record_class(adds):
        """A new subclass of pydb.Record, referred to by nothing else."""
        return type("K", (pydb.Record,), {"dict": {}, "slot": {"__slots__": ("x",)},
                                          "weakref": {"__slots__": ("__weakref__",)},
                                          "nothing": {"__slots__": ()}}[adds])

    def through_dict(rec, held):
        rec.me = (rec, held)

    def through_slot(rec, held):
        rec.x = (rec, held)

    def through_class(rec, held):
        type(rec).keep = (rec, held)

    with pydb.open(base) as db:
        assert type(db[1]) is pydb.Record and not gc.is_tracked(db[1])
        for adds in ("dict", "slot", "weakref"):
            with pytest.raises(ValueError, match="adds no __dict__ and no slot"):
                _pydb._set_record_class(record_class(adds), True)
        try:
            for adds, cycle in (("dict", through_dict), ("slot", through_slot),
                                ("nothing", through_class)):
                cls = record_class(adds)
                _pydb._set_record_class(cls)
                rec = db[1]
                assert type(rec) is cls and gc.is_tracked(rec)
                held = _Held()
                cycle(rec, held)
                gone = weakref.ref(held)
                immortal = sys.getrefcount(cls) >= 1 << 30   # (3.13t, above)
                del rec, cls, held
                _pydb._set_record_class(pydb.Record, True)
                gc.collect()
                if not (immortal and adds == "nothing"):
                    assert gone() is None, adds
        finally:
            _pydb._set_record_class(pydb.Record, True)
        assert type(db[2]) is pydb.Record and not gc.is_tracked(db[2])


@pytest.mark.sanitize_address
def test_records_let_go_are_made_again_of_the_class_of_the_moment(tmp_path):
    """Records of pydb.Record that a scan lets go are kept (at most 256)
    and made again for the next reads (_pydb_record.c, record_free): each
    read gives its own record's MFN and fields, untracked.  A change of
    the record class frees the kept Records: for a class whose records
    are tracked none is kept, and every record read is of that class and
    tracked; after the change back, pydb.Record's are kept again.  A
    record kept by the caller stays whole meanwhile."""
    records = [[(1, f"v{i}".encode()), (2, b"x" * (i % 40))] for i in range(600)]
    base = build_db(tmp_path / "f", "isis-packed", records)
    kept_list = _pydb._testing.records_kept

    class Tracked(pydb.Record):
        __slots__ = ()

    with pydb.open(base) as db:
        kept = db[7]
        try:
            for cls, untracked in ((pydb.Record, True), (Tracked, False), (pydb.Record, True)):
                _pydb._set_record_class(cls, untracked)
                assert kept_list() == (0, untracked and SHARES)
                for _ in range(2):
                    batch = list(db)   # 600 records alive at once, then let go
                    for mfn, rec in enumerate(batch, 1):
                        assert type(rec) is cls and gc.is_tracked(rec) is not untracked
                        assert rec.mfn == mfn
                        assert [(f.tag, f.raw) for f in rec.fields] == records[mfn - 1]
                    del batch, rec
                    assert kept_list() == ((256, True) if untracked and SHARES else (0, False))
        finally:
            _pydb._set_record_class(pydb.Record, True)
        assert (kept.mfn, [(f.tag, f.raw) for f in kept.fields]) == (7, records[6])


def test_a_record_class_with_a_finalizer_has_it_called_for_every_record(tmp_path):
    """A record class that adds no slot but a __del__ may be untracked;
    its records are not kept for reuse (the collector would take a
    record made again for one already finalized and skip its __del__):
    the finalizer runs once for each of 1,000 records read."""
    base = build_db(tmp_path / "d", "isis-packed", [[(1, b"a")]] * 1000)
    finalized = []

    class Finalized(pydb.Record):
        __slots__ = ()

        def __del__(self):
            finalized.append(self.mfn)

    with pydb.open(base) as db:
        try:
            _pydb._set_record_class(Finalized, True)
            assert _pydb._testing.records_kept() == (0, False)
            for _ in range(2):
                assert sum(1 for _rec in db) == 1000
        finally:
            _pydb._set_record_class(pydb.Record, True)
    assert sorted(finalized) == sorted(list(range(1, 1001)) * 2)


def test_a_finalizer_given_to_the_record_class_later_is_called_for_every_record(tmp_path):
    """A __del__ given to a record class after it was set (its records
    kept for reuse until then) is called for every record let go from
    then on: each is freed, not kept (the list was decided when the
    class was set, and a record made again for one already finalized
    would not have its __del__ called)."""
    base = build_db(tmp_path / "d", "isis-packed", [[(1, b"a")]] * 1000)
    finalized = []

    class Later(pydb.Record):
        __slots__ = ()

    with pydb.open(base) as db:
        try:
            _pydb._set_record_class(Later, True)
            batch = list(db)   # 1,000 records alive at once, then let go
            del batch
            assert _pydb._testing.records_kept() == ((256, True) if SHARES else (0, False))
            Later.__del__ = lambda self: finalized.append(self.mfn)
            for _ in range(2):
                assert sum(1 for _rec in db) == 1000
        finally:
            _pydb._set_record_class(pydb.Record, True)
    assert sorted(finalized) == sorted(list(range(1, 1001)) * 2)
