"""Existing CDS/ISIS inverted files read as they are (issue 4, item 5).

Formats: docs/isis-formats.md §4 (.cnt, .n0x, classic .l0x/.ifp, LIND
.ly0x/.iyp, stale/mixed sets §4.8), §5.3 (key form).  Expected numbers
come from ../shared/data/isis/SOURCES.md (column "inverted file
(checked)", measured there with independent readers; parsed below) and
from the records of the databases themselves (hand-checked keys).

Hostile copies are made in tmp_path from the real files and must raise
CorruptionError naming the damaged file and a byte offset -- never crash
or hang; a hypothesis property test damages random bytes.

Environment: PYDB_HYPOTHESIS_EXAMPLES (default 150) sizes the property
test; PYDB_SANITIZER_INNER derandomizes it under tests/test_sanitizers.py.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import threading
import warnings
from pathlib import Path

import pytest

import pydb
import pydb.index as pindex
from pydb.index import Index, Posting, Term

from conftest import DATA, SANITIZER, data_path, hypothesis_examples, need, patch_file

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    given = None

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = pytest.mark.sanitize_address


BIBL = "cpan__Biblio-Isis-0.24/data/winisis/BIBL"
SAMPLE = "scieloorg__pyisis/pyisis/pyisis/sample/cds"     # classic 10/30 aligned
XCDS = "scieloorg__pyisis/pycisis/tests/xcds"             # LIND 16/60
MAIL = "scieloorg__pyisis/pyisis/pyisis/tests/fixtures/MAIL"  # LIND, tree 2 empty
CDSX = "bireme__cisis/wxis_src/examples/cdsx/cds"         # LIND 16/60 (FFI MST)
CISIS_CDS = "bireme__cisis/tests/CDS"                     # classic + LIND4 sets
MARC = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/marc/data/marc"
RDA = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda"
DUBCORE = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/dubcore/data/dubcore"
FIELD3 = "bireme__isis2json/fixtures/field3/FIELD3"

#: Directories holding two index sets, and the one that is current there
#: (SOURCES.md notes: "the .n0x/.cnt belong to the LIND4 set").
CURRENT_SET = {CISIS_CDS: "lind"}


def all_terms(ix) -> list:
    return list(ix.terms())


def per_tree(ix) -> dict:
    """{tree: (keys, postings)}: a key is in tree 1 iff len <= LE1 (§4.1)."""
    le1 = ix.info["le1"]
    out = {1: [0, 0], 2: [0, 0]}
    for key, count in ix.raw_terms():
        t = 1 if len(key) <= le1 else 2
        out[t][0] += 1
        out[t][1] += count
    return {t: tuple(v) for t, v in out.items()}


# ------------------------------------------------------------ SOURCES.md

ROW = re.compile(r"^\| `([^`]+\.mst)` \|(.*)$")
TREE = re.compile(r"(\d):(classic|lind) LE(\d+)(?:/infx(\d))? keys=(\d+)"
                  r"(?: posts=(\d+))?(?: (LIND4?) ok=(\d+)/(\d+))?")


def sources_rows():
    """(mst relpath, cell) for every master file whose inverted-file cell
    names a .CNT, from SOURCES.md."""
    src = DATA / "SOURCES.md"
    if not src.is_file():
        return []
    out = []
    for line in src.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(2).split("|")]
        if len(cells) >= 11 and cells[9].startswith("CNT"):
            out.append((m.group(1), cells[9]))
    return out


def test_sources_table_lists_every_index():
    """Every .cnt under the data folder is described by SOURCES.md, so the
    parametrised test below covers every shipped inverted file."""
    if not DATA.is_dir():
        pytest.skip("no data")
    described = {mst[:-4].lower() for mst, _ in sources_rows()}
    cnts = {str(p.relative_to(DATA))[:-4].lower() for p in DATA.rglob("*")
            if p.suffix.lower() == ".cnt"}
    assert cnts and cnts == described, cnts ^ described


@pytest.mark.parametrize("mst,cell", sources_rows() or [("-", "-")])
def test_counts_as_in_sources(mst, cell):
    """Key and posting counts per tree exactly as SOURCES.md says, and
    every posting list decodes to its count."""
    if mst == "-":
        pytest.skip("SOURCES.md not found")
    base = need(mst[:-4])
    size = 28 if cell.startswith("CNT28") else 26
    trees = [m.groups() for m in TREE.finditer(cell)]
    kinds = {k for _, k, *_ in trees}
    kind = CURRENT_SET.get(mst[:-4], next(iter(kinds)) if kinds else "classic")
    with Index.open_isis(base) as ix:
        info = ix.info
        assert ix.kind == "isis-" + kind
        assert info["layout"] == ("aligned" if size == 28 else "packed")
        got = per_tree(ix)
        want = {1: (0, 0), 2: (0, 0)}
        for t, k, le, infx, keys, posts, lind, ok, total in trees:
            if k != kind:
                continue
            t = int(t)
            assert info["le1" if t == 1 else "le2"] == int(le)
            if k == "lind":
                assert info["infx"] == int(infx)
                assert info["mfn_bytes"] == (4 if lind == "LIND4" else 3)
                assert got[t][0] == int(keys) == int(ok) == int(total)
            else:
                want[t] = (int(keys), int(posts))
        if kind == "classic":
            assert got == want
        for key, count in ix.raw_terms():
            assert len(ix.postings(key)) == count, key
        assert not info["trees"][0]["empty"] or got[1] == (0, 0)


def test_classic_sizes_and_geometry():
    """Record sizes of §4.3/4.4 for each LE pair, packed and aligned."""
    cases = {BIBL: (10, 30, "packed", 0, 148, 192, 348, 392),
             SAMPLE: (10, 30, "aligned", 2, 168, 212, 368, 412),
             MARC: (16, 60, "packed", 0, 208, 252, 648, 692),
             DUBCORE: (16, 256, "packed", 0, 208, 252, 2608, 2652)}
    for rel, (le1, le2, layout, pad, n1, l1, n2, l2) in cases.items():
        with Index.open_isis(need(rel)) as ix:
            i = ix.info
            assert (i["le1"], i["le2"], i["layout"], i["key_pad"]) == (le1, le2, layout, pad)
            t1, t2 = i["trees"]
            assert (t1["node_size"], t1["leaf_size"], t2["node_size"],
                    t2["leaf_size"]) == (n1, l1, n2, l2)
            assert t1["nodes"] * n1 == os.path.getsize(t1["node_file"])
            assert t1["leaves"] * l1 == os.path.getsize(t1["leaf_file"])
            assert ix.caps == {"tag": True, "occ": True, "cnt": True}
            assert i["postings"].lower().endswith(".ifp")


def test_bibl_cnt_as_in_formats_4_6():
    """BIBL.CNT = {1,5,5,15,5,0,1,1,8,1} and {2,5,5,15,5,0,1,1,4,0}
    (IDTYPE ORDN ORDF N K LIV POSRX NMAXPOS FMAXPOS ABNORMAL), §4.6."""
    with Index.open_isis(need(BIBL)) as ix:
        t1, t2 = ix.info["trees"]
        assert (t1["liv"], t1["root"], t1["nodes"], t1["leaves"]) == (0, 1, 1, 8)
        assert (t2["liv"], t2["root"], t2["nodes"], t2["leaves"]) == (0, 1, 1, 4)


# ------------------------------------------------------------ exact postings

def test_bibl_example_postings():
    """docs/isis-formats.md §4.6: key 2140 -> (1,686,1,1), (1,990,1,1),
    (2,686,1,1)...; key 7875 -> (5,991,1,3).  The full list of 2140 was
    checked against the records: MFN 1 has 686 ^a2140 and 990 2140; MFN 2
    has two 686 occurrences ^a2140 (CNT 1, 2) and 990 2140; MFN 3 (now
    logically deleted: its postings remain, §6.4) has 675 ^a2140, two 686
    and 990 2140; MFN 4 has 686 ^a2140.  7875 is the 3rd 991 of MFN 5."""
    base = need(BIBL)
    with pydb.open(base, encoding="cp850") as db:
        p2140 = db.postings("2140")
        assert p2140 == [(1, 686, 1, 1), (1, 990, 1, 1), (2, 686, 1, 1),
                         (2, 686, 1, 2), (2, 990, 1, 1), (3, 675, 1, 1),
                         (3, 686, 1, 1), (3, 686, 1, 2), (3, 990, 1, 1),
                         (4, 686, 1, 1)]
        assert all(isinstance(p, Posting) for p in p2140)
        for p in p2140:   # every posting names a field holding 2140
            assert any("2140" in v for v in db[p.mfn][p.tag])
        assert db.postings("7875") == [Posting(5, 991, 1, 3)]
        assert db[5][991][2] == "^a7875"
        assert db.postings(b"7875") == db.postings("7875", raw=True)
        assert db.postings("NO SUCH KEY") == []
        assert db.postings("") == []


ODDS = "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds"


def _segments(base: str, key: bytes) -> list:
    """SEGP of every segment in the IFP chain of `key`, read with an
    independent decoder of §4.4/4.5 (odds: LE 16/60, packed leaves)."""
    ifp = Path(base + ".ifp").read_bytes()

    def header(b, w):
        o = (b - 1) * 512 + 4 + 4 * w
        return struct.unpack("<5i", ifp[o:o + 20])

    le = 16 if len(key) <= 16 else 60
    leaves = Path(base + (".l01" if le == 16 else ".l02")).read_bytes()
    rec = 12 + 10 * (le + 8)
    for r in range(len(leaves) // rec):
        b = leaves[r * rec:(r + 1) * rec]
        for j in range(struct.unpack("<H", b[4:6])[0]):
            e = b[12 + j * (le + 8):12 + (j + 1) * (le + 8)]
            if e[:le].rstrip(b" ") == key:
                h = header(*struct.unpack("<2i", e[le:le + 8]))
                segs = [h[3]]
                while h[0] or h[1]:
                    h = header(h[0], h[1])
                    segs.append(h[3])
                return segs
    raise KeyError(key)


def test_multi_segment_chains():
    """ABCD's odds.ifp holds lists split over several segments (§4.5,
    updated in place), some with an empty first or trailing segment.  The
    technique-0 keys "PY_"v64 and "ST_"v94 (odds.fst) give exactly the
    records whose v64/v94 is the value, CNT 1 (records read with
    skip_damaged: one XRF entry of odds is damaged, SOURCES.md)."""
    base = need(ODDS)
    assert _segments(base, b"PY_1986") == [2, 2, 3, 3]
    assert _segments(base, b"ST_2") == [2, 1, 1, 4, 2, 1, 2, 3, 6]
    assert _segments(base, b"ST_0") == [0, 4]
    assert _segments(base, b"CU_FI") == [2, 0, 0]
    with pydb.open(base, encoding="cp1252") as db:
        recs = list(db.records(skip_damaged=True))
        for key, tag in (("PY_1986", 64), ("PY_2014", 64), ("ST_2", 94),
                         ("ST_0", 94)):
            value = key.split("_", 1)[1]
            want = [(r.mfn, tag, 1, 1) for r in recs if r[tag][:1] == [value]]
            assert db.postings(key) == want and want, key
        assert [p.mfn for p in db.postings("CU_FI")] == [4, 30]


def _derive_cds(db) -> dict:
    """Postings derived from the records of the CDS sample with its FST
    (cds.fst: ``70 0 MHU,(V70/)``, ``24 4 MHU,V24``, ``69 2 V69``) for
    plain-ASCII keys: technique 0 one key per V70 occurrence -- stored as
    OCC 1, CNT = occurrence number (the files say so, not §5.2's "each
    line is a new occurrence"; WinISIS BIBL does the same for 686),
    technique 4 words of letters with stop words counted (cds.stw),
    technique 2 the <...> terms of V69 (docs/isis-formats.md §5.2-5.4)."""
    stop = set(Path(str(data_path(SAMPLE)) + ".stw").read_text().split())
    out: dict = {}

    def add(key, post):
        key = key.strip().upper()[:30].rstrip()
        if key and key.isascii():
            out.setdefault(key, []).append(post)

    for rec in db:
        for occ, v in enumerate(rec[70], 1):
            add(v, (rec.mfn, 70, 1, occ))
        for occ, v in enumerate(rec[24], 1):
            words = re.findall(r"[A-Za-z]+", v)
            for cnt, w in enumerate(words, 1):
                if w.upper() not in stop:
                    add(w, (rec.mfn, 24, occ, cnt))
        for occ, v in enumerate(rec[69], 1):
            for cnt, term in enumerate(re.findall(r"<([^>]*)>", v), 1):
                add(term, (rec.mfn, 69, occ, cnt))
    return out


def test_sample_cds_hand_checked_keys():
    """Keys of the pyisis CDS sample against its records: MFN 1's title
    (v24) 'Techniques for the measurement of transpiration of individual
    plants' puts TRANSPIRATION at word 6 (FOR, THE, OF counted); MFN 2's
    '<The> Controlled climate ... assimilation and transpiration' at word
    14; its authors (v70) Magalhaes, A.C. / Franco, C.M. are occurrences
    1 and 2 (stored as OCC 1, CNT 1 and 2); v69 '<plant physiology><plant transpiration>...' gives
    PLANT TRANSPIRATION as term 2.  Then several keys re-derived from all
    records with the FST."""
    with pydb.open(need(SAMPLE), encoding="cp850") as db:
        tr = db.postings("transpiration")
        assert tr[:2] == [(1, 24, 1, 6), (2, 24, 1, 14)]
        assert db.postings("Magalhaes, A.C.") == [(1, 70, 1, 1)]
        assert (1, 70, 1, 2) in db.postings("FRANCO, C.M.")
        assert (1, 69, 1, 2) in db.postings("plant transpiration")
        derived = _derive_cds(db)
        for key in ("TRANSPIRATION", "WATER", "PLANT TRANSPIRATION",
                    "MAGALHAES, A.C.", "FRANCO, C.M.", "UNESCO",
                    "GROUNDWATER", "EVAPOTRANSPIRATION", "SOIL", "CLIMATE"):
            assert db.postings(key) == sorted(derived[key]), key
        # a key longer than LE1 (10) lives in tree 2
        assert len("PLANT TRANSPIRATION") > db.index.info["le1"]


def test_sample_cds_quoted_truncation_and_operator_words():
    """CDS/ISIS searches as a WinISIS user types them, on the pyisis CDS
    sample's own inverted file: a '$' before the closing quote truncates
    a key that holds blanks (CISIS cib72.c; the AGRIS help's
    "TI=ARICA (south$"), and the operator words work in lower case
    (CISIS cib71.c gettoken)."""
    with pydb.open(need(SAMPLE), encoding="cp850") as db:
        assert list(db.search('"MAGALHAES, A$"')) == [1]
        plant_tr = sorted({p[0] for p in db.postings("PLANT TRANSPIRATION")})
        assert plant_tr == [1, 4, 5, 8, 19, 23]
        assert list(db.search('"plant trans$"')) == plant_tr
        assert list(db.search('"PLANT TR$"/(69)')) == plant_tr
        assert list(db.search('"PLANT TR"$')) == plant_tr
        assert list(db.search("water and plant$")) == [4, 5, 10, 11, 12, 13, 14, 16,
                                                       22, 23, 24]
        assert list(db.search("WATER * PLANT$")) == list(db.search("water and plant$"))
        assert list(db.search("water and not plant$")) == [42, 51, 56]
        assert list(db.search("water Or soil")) == list(db.search("WATER + SOIL"))


def test_search_of_an_inverted_file_behind_its_master_file_warns(tmp_path):
    """ABCD's servers sample: its XRF flags 48 records new or changed
    since the inverted file was made, and a search of it said nothing (a
    librarian's trial: 'SPA$' found 4 of 18).  It warns, naming the count,
    once per change of the database; pydb's own append is counted the
    same.  The pyisis CDS sample (every record flagged new, as a CISIS
    load leaves them, inverted or not) does not warn."""
    servers = Path(need("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/servers/data/servers"))
    with pydb.open(servers) as db, pytest.warns(pydb.StaleIndexWarning) as got:
        assert list(db.search("SPA$")) == [2, 11, 12, 45]
    assert len(got) == 1
    assert str(got[0].message) == (
        f"{servers}: its CDS/ISIS inverted file is behind the master file: 48 record(s) "
        "the XRF flags new or changed since it was inverted (pydb's writes too) are missed "
        f"or found by their old keys; invert with the ISIS tools, or build a native index: "
        f"pydb index {servers}")
    with pydb.open(need(SAMPLE), encoding="cp850") as db, warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(db.search("WATER")) == 14
    for ext in (".mst", ".xrf", ".cnt", ".n01", ".n02", ".l01", ".l02", ".ifp"):
        shutil.copy(str(servers) + ext, tmp_path / ("servers" + ext))
    with pydb.open(tmp_path / "servers", readonly=False, encoding="cp850") as db, \
            warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        assert list(db.search("SPA$")) == [2, 11, 12, 45]
        assert list(db.search("SPA$")) == [2, 11, 12, 45]     # unchanged: said once
        db.append([(1, "SPAIN AGAIN")])
        assert list(db.search("SPA$")) == [2, 11, 12, 45]     # the new one is missed
    assert [re.search(r"\d+ record", str(w.message))[0] for w in got] == [
        "48 record", "49 record"]
    # ABCD's rda (1 record behind): its FST does not parse, and the advice
    # says so (it named 'pydb index', which fails on it: a review)
    rda = Path(need("ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/rda/data/rda"))
    shutil.copytree(rda.parent, tmp_path / "rda")
    copy = tmp_path / "rda" / "rda"
    with pydb.open(copy) as db, pytest.warns(pydb.StaleIndexWarning) as got:
        db.search("A$")
    assert str(got[0].message).endswith(
        f"build a native index: pydb index {copy} --fst FILE ({copy}.fst "
        f"beside it does not parse: {copy}.fst: FST line 2, column 14: "
        "unterminated conditional literal \"v50^a,|.|v50^b, (no closing \" on the line))")


def test_lind_postings_against_records():
    """LIND lists (§4.7) carry MFNs only: the MFN sets of author keys equal
    the records whose v70 holds the name, for 3-byte (LIND) and 4-byte
    (LIND4) MFN lists; MFNs stay within the database."""
    for rel, width, infx, align in ((XCDS, 3, 4, 4), (CDSX, 3, 4, 4),
                                    (CISIS_CDS, 4, 8, 8), (MAIL, 3, 4, 4)):
        with pydb.open(need(rel), encoding="cp850") as db:
            ix = db.index
            i = ix.info
            assert (i["mfn_bytes"], i["infx"], i["infx_align"]) == (width, infx, align), rel
            assert ix.kind == "isis-lind" and ix.caps == {"tag": False, "occ": False, "cnt": False}
            for key, count in ix.raw_terms():
                ps = ix.postings(key)
                assert len(ps) == count
                assert all(1 <= p.mfn <= db.max_mfn and p.tag == p.occ == 0 for p in ps)
            if rel == MAIL:
                assert i["trees"][1]["empty"]
                continue
            by_author: dict = {}
            for rec in db:
                for v in rec[70]:
                    by_author.setdefault(v.upper(), set()).add(rec.mfn)
            checked = 0
            for name, mfns in by_author.items():
                if len(name) <= i["le2"] and name.isascii() and "<" not in name:
                    assert {p.mfn for p in db.postings(name)} == mfns, name
                    checked += 1
            assert checked > 100


# ------------------------------------------------------------ term enumeration

def test_terms_order_prefix_start():
    with pydb.open(need(MARC)) as db:
        ix = db.index
        full = all_terms(ix)
        keys = [t.key for t in full]
        assert len(full) == 7394 + 2736
        raw = [k for k, _ in ix.raw_terms()]
        assert raw == sorted(raw)    # no key below a blank in these files
        assert len(set(raw)) == len(raw)
        assert any(len(k) > 16 for k in raw[:200])   # trees interleaved
        for prefix in ("A", "WATER", "MA", "ZZZZ", "", "HISTORY OF", "Q"):
            want = [t for t in full if t.key.startswith(prefix)]
            assert list(db.terms(prefix)) == want, prefix
        raw_full = list(ix.raw_terms())
        for start in (b"M", b"MARKET", raw[100], raw[-1], b"~"):
            assert list(ix.raw_terms(start=start)) == [t for t in raw_full if t[0] >= start]
        assert list(db.terms(start="market")) == list(db.terms(start="MARKET"))
        s = keys[5000]
        assert list(db.terms("", s))[0].key == s            # inclusive
        assert list(db.terms(s[:2], s)) == [t for t in full
                                            if t.key.startswith(s[:2]) and t.key >= s]
        assert list(db.terms("a")) == list(db.terms("A"))   # key form
        assert list(ix.terms(b"a")) == []                   # bytes: as given
        assert all(isinstance(t, Term) for t in full[:10])


def test_terms_batches_restart_after_last_key(monkeypatch):
    """Iteration goes on from the last key of each batch (exclusive), so a
    small batch gives the same sequence."""
    with Index.open_isis(need(SAMPLE)) as ix:
        full = all_terms(ix)
        monkeypatch.setattr(pindex, "TERM_BATCH", 7)
        assert all_terms(ix) == full
        assert list(ix.terms("W")) == [t for t in full if t.key.startswith("W")]
        assert list(ix.raw_terms(b"W")) == [(t.key.encode(), t.count) for t in full
                                           if t.key.startswith("W")]


def test_trees_one_or_none():
    """MAIL: only tree 1 (.ly2/.n02 empty); FIELD3: both trees empty."""
    with Index.open_isis(need(MAIL)) as ix:
        keys = [t.key for t in ix.terms()]
        assert len(keys) == 391 and max(map(len, keys)) <= 16
        assert ix.info["trees"][1]["empty"] and not ix.info["trees"][0]["empty"]
    with Index.open_isis(need(FIELD3)) as ix:
        assert all_terms(ix) == [] and ix.postings("X") == []
        assert ix.info["trees"][0]["empty"] and ix.info["trees"][1]["empty"]


def test_key_form():
    with Index.open_isis(need(SAMPLE)) as ix:
        assert ix.key("  water ") == b"WATER"
        assert ix.key("a" * 40) == b"A" * 30       # truncated to LE2
        assert ix.postings("a" * 40) == ix.postings("A" * 30)
        assert ix.postings("water") == ix.postings(b"WATER")
        assert ix.postings("water", raw=True) == []


# ------------------------------------------------------------ stale sets (§4.8)

def _copy_set(dst: Path, src_base: str, exts, name="cds"):
    src = Path(src_base)
    for p in src.parent.iterdir():
        if p.stem.lower() == src.name.lower() and p.suffix.lower()[1:] in exts:
            shutil.copy(p, dst / f"{name}.{p.suffix[1:].lower()}")


def test_stale_set_cisis_cds_picks_lind():
    with Index.open_isis(need(CISIS_CDS)) as ix:
        i = ix.info
        assert ix.kind == "isis-lind" and i["le2"] == 512
        assert i["postings"].endswith("CDS.iyp")
        assert "classic set" in i["note"] and "stale" in i["note"]


def test_stale_set_synthetic(tmp_path):
    """A classic set with a foreign LIND set beside it keeps the classic
    one, and a LIND set with a foreign classic set keeps the LIND one."""
    a = tmp_path / "a"
    a.mkdir()
    _copy_set(a, need(SAMPLE), {"cnt", "n01", "n02", "l01", "l02", "ifp"})
    _copy_set(a, need(XCDS), {"ly1", "ly2", "iyp"})
    with Index.open_isis(a / "cds") as ix:
        assert ix.kind == "isis-classic" and "LIND set" in ix.info["note"]
        assert per_tree(ix) == {1: (679, 1309), 2: (630, 1040)}
    b = tmp_path / "b"
    b.mkdir()
    _copy_set(b, need(XCDS), {"cnt", "n01", "n02", "ly1", "ly2", "iyp"})
    _copy_set(b, need(SAMPLE), {"l01", "l02", "ifp"})
    with Index.open_isis(b / "cds") as ix:
        assert ix.kind == "isis-lind" and "classic set" in ix.info["note"]
        assert per_tree(ix)[1][0] == 1037


def test_extension_case_and_any_file(tmp_path):
    _copy_set(tmp_path, need(BIBL), {"cnt", "n01", "n02", "l01", "l02", "ifp"}, "Bibl")
    for p in tmp_path.iterdir():
        p.rename(p.with_suffix(p.suffix.upper()))
    with Index.open_isis(tmp_path / "bibl.cnt") as ix:
        assert ix.postings("7875") == [(5, 991, 1, 3)]


# --------------------------------------- database (the CLI: tests/test_cli.py)

def test_database_index_lifecycle():
    with pydb.open(need(BIBL), encoding="cp850") as db:
        ix = db.index
        assert ix is db.index and ix.kind == "isis-classic"
        assert [t.key for t in db.terms("AND")] == ["AND", "ANDRE"]
    assert ix.closed
    with pytest.raises(pydb.ClosedError):
        _ = db.index
    with pytest.raises(pydb.ClosedError):
        ix.postings("A")


def test_database_without_index():
    base = need("bireme__isis2json/fixtures/cds/cds")
    with pydb.open(base) as db:
        assert db.index is None
        with pytest.raises(pydb.UnsupportedError):
            db.terms()
        with pytest.raises(pydb.UnsupportedError):
            db.postings("X")
    # classic leaves and .ifp without .cnt: no usable index (SOURCES: "-")
    with pytest.raises(pydb.DatabaseNotFoundError):
        Index.open_isis(need("scieloorg__pyisis/db/cds"))
    with pytest.raises(pydb.DatabaseNotFoundError):
        Index.open_isis(need("cpan__Biblio-Isis-0.24/data/isismarc/BIBL"))


def test_threads_share_one_index():
    with Index.open_isis(need(RDA)) as ix:
        keys = [k for k, _ in ix.raw_terms(b"C")][:400]
        want = {k: ix.postings(k) for k in keys}
        errors = []

        def work():
            try:
                for k in keys:
                    assert ix.postings(k) == want[k]
                assert [k for k, _ in ix.raw_terms(b"C")][:400] == keys
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=work) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors


# ------------------------------------------------------------ hostile copies

def _classic_copy(tmp_path, rel=BIBL) -> Path:
    _copy_set(tmp_path, need(rel), {"cnt", "n01", "n02", "l01", "l02", "ifp"})
    return tmp_path / "cds"



def _exercise(base) -> int:
    """Open, enumerate every key and decode every list; returns keys seen."""
    with Index.open_isis(base) as ix:
        n = 0
        for key, count in ix.raw_terms():
            assert len(ix.postings(key)) == count
            n += 1
        return n


def _expect_corrupt(base, file_suffix, at=None):
    with pytest.raises(pydb.CorruptionError) as ei:
        _exercise(base)
    e = ei.value
    assert e.filename.lower().endswith(file_suffix), e
    assert e.offset is not None and e.offset >= 0, e
    if at is not None:
        assert e.offset == at, e
    assert e.reason
    return e


def test_hostile_truncated_leaf_file(tmp_path):
    base = _classic_copy(tmp_path)
    leaf = tmp_path / "cds.l01"
    os.truncate(leaf, os.path.getsize(leaf) - 100)
    _expect_corrupt(base, ".l01")


def test_hostile_bad_pos(tmp_path):
    base = _classic_copy(tmp_path, SAMPLE)   # leaves of 212 bytes
    patch_file(tmp_path / "cds.l01", 212 * 3, struct.pack("<i", 99))   # leaf 4
    _expect_corrupt(base, ".l01", at=212 * 3)
    base = _classic_copy(tmp_path, SAMPLE)
    patch_file(tmp_path / "cds.n01", 0, struct.pack("<i", 7))          # node 1
    _expect_corrupt(base, ".n01")


def test_hostile_cyclic_leaf_chain(tmp_path):
    """Leaf 3's PS pointed back at leaf 1: the chain would loop."""
    base = _classic_copy(tmp_path, SAMPLE)
    patch_file(tmp_path / "cds.l01", 212 * 2 + 8, struct.pack("<i", 1))
    e = _expect_corrupt(base, ".l01")
    assert "ascend" in e.reason or "cycle" in e.reason


def test_hostile_cyclic_chain_cycle_guard(tmp_path):
    """Leaf chain of the last leaf pointing at itself."""
    base = _classic_copy(tmp_path, BIBL)
    with Index.open_isis(need(BIBL)) as ix:
        n = ix.info["trees"][1]["leaves"]
    patch_file(tmp_path / "cds.l02", 392 * (n - 1) + 8, struct.pack("<i", n))
    _expect_corrupt(base, ".l02")


def test_hostile_posting_count_beyond_file(tmp_path):
    base = _classic_copy(tmp_path)
    ifp = tmp_path / "cds.ifp"
    # first list at block 1 word 2 (§4.5): header TOTP at word 4
    patch_file(ifp, 4 + 4 * 4, struct.pack("<i", 10 ** 8))
    _expect_corrupt(base, ".ifp", at=4 + 4 * 2)


def test_hostile_bad_cnt(tmp_path):
    base = _classic_copy(tmp_path)
    with open(tmp_path / "cds.cnt", "ab") as f:
        f.write(b"xx")
    _expect_corrupt(base, ".cnt", at=0)
    base = _classic_copy(tmp_path)
    patch_file(tmp_path / "cds.cnt", 12, struct.pack("<i", 5))   # POSRX > NMAXPOS
    _expect_corrupt(base, ".cnt", at=0)


def test_hostile_lind_list_beyond_file(tmp_path):
    _copy_set(tmp_path, need(XCDS), {"cnt", "n01", "n02", "ly1", "ly2", "iyp", "mst"})
    # first entry of leaf 1: KEY[16], INFO1, INFO2 (count), INFO3
    patch_file(tmp_path / "cds.ly1", 16 + 16 + 4, struct.pack("<i", 10 ** 6))
    with pytest.raises(pydb.CorruptionError) as ei:
        _exercise(tmp_path / "cds")
    assert ei.value.filename.endswith((".iyp", ".ly1"))


if given is not None:
    EXAMPLES = hypothesis_examples(150)

    @settings(max_examples=EXAMPLES, deadline=None,
              derandomize=bool(SANITIZER),
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(which=st.sampled_from([BIBL, XCDS]),
           damage=st.lists(st.tuples(st.sampled_from(["cnt", "n01", "n02", "l01", "l02",
                                                      "ifp", "ly1", "ly2", "iyp"]),
                                     st.floats(0, 1, exclude_max=True),
                                     st.binary(min_size=1, max_size=4)),
                           min_size=1, max_size=4))
    def test_random_damage_never_crashes(tmp_path_factory, which, damage):
        """Random bytes overwritten in random index files: every outcome is
        a clean result or a pydb.Error (CorruptionError with file and
        offset), never a crash, a hang or another exception."""
        if not DATA.is_dir():
            pytest.skip("no data")
        d = tmp_path_factory.mktemp("dmg")
        _copy_set(d, str(data_path(which)),
                  {"cnt", "n01", "n02", "l01", "l02", "ifp", "ly1", "ly2", "iyp"})
        for ext, where, data in damage:
            p = d / f"cds.{ext}"
            if not p.exists() or p.stat().st_size == 0:
                continue
            patch_file(p, int(where * p.stat().st_size), data)
        try:
            _exercise(d / "cds")
        except pydb.CorruptionError as e:
            assert e.filename and e.reason
        except AssertionError:
            pass   # damage that leaves a consistent but different index
        shutil.rmtree(d)


def test_a_leaf_address_outside_the_ifp_is_the_leaf_files_fault(tmp_path):
    """One byte of a posting address in the pyisis cds sample's .l02
    (offset 22206) set to 0xFF: the error names the .l02, which holds the
    bad address, not the .ifp at byte 66,890,244 of a 47,104-byte file
    (a review)."""
    src = need(SAMPLE)
    for name in os.listdir(os.path.dirname(src)):
        if name.startswith("cds."):
            shutil.copy(os.path.join(os.path.dirname(src), name), tmp_path)
    patch_file(tmp_path / "cds.l02", 22206, b"\xff")
    with pydb.open(tmp_path / "cds", encoding="cp850") as db:
        with pytest.raises(pydb.CorruptionError) as e:
            for t in db.index.terms(""):
                db.postings(t.key)
    assert os.path.basename(e.value.filename) == "cds.l02"
    assert "posting list address 86/16711680 outside the IFP (92 blocks)" in str(e.value)
    assert e.value.offset == 22200   # the address (block, then word) in the .l02
    assert os.path.getsize(tmp_path / "cds.ifp") == 47104
