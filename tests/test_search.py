"""The search language (csrc/search_parse.c, search_eval.c, pydb/search.py; docs/isis-formats.md §6)
over the in-memory index (csrc/memindex.c).

Every expected MFN list below was worked out by hand from TABLE, whose
rows are chosen so that each operator's edge cases matter: the same MFN
under different TAGs (record 4), the same TAG in different OCCs (record
3), CNT distances 0 (record 8), 1 (record 1), 2 (record 2, order
reversed) and 3 (record 5, order reversed).
"""

from __future__ import annotations

import re
import struct
import threading
from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pydb
from pydb import _pydb
from pydb.errors import ClosedError, SearchSyntaxError, UnsupportedError
from pydb.search import SearchResult, fit_case, search

from conftest import hypothesis_examples

# Rerun under the sanitizer(s) by tests/test_sanitizers.py (conftest.py).
pytestmark = [pytest.mark.sanitize_address, pytest.mark.sanitize_thread]


# (mfn, tag, occ, cnt).  Tags: 10 title, 20 subject (repeatable: OCC 1, 2),
# 30 abstract, 40 notes, 50 phrases.
TABLE = {
    b"APPLE": [(1, 10, 1, 1), (2, 10, 1, 3), (3, 20, 1, 1), (4, 20, 2, 5),
               (5, 10, 1, 4), (6, 30, 1, 2), (8, 10, 1, 2)],
    b"BANANA": [(1, 10, 1, 2), (2, 10, 1, 1), (3, 20, 2, 1), (4, 10, 1, 5),
                (5, 10, 1, 1), (7, 10, 1, 1), (8, 10, 1, 2)],
    b"CHERRY": [(1, 10, 1, 3), (2, 10, 1, 6), (6, 30, 1, 4), (9, 20, 1, 1),
                (10, 40, 1, 1)],
    b"APRICOT": [(3, 20, 1, 2), (9, 20, 1, 3), (10, 40, 1, 2)],
    b"AP": [(10, 40, 1, 3)],
    b"APPLE PIE": [(7, 50, 1, 1)],
    b"A+B": [(10, 50, 1, 1)],
    b"NOT": [(9, 50, 1, 1)],
}
# Truncation over many keys: ZOO000..ZOO499, key i -> MFN 100 + i % 50,
# TAG 10 for even i, 20 for odd i.
ZOO = {b"ZOO%03d" % i: [(100 + i % 50, 10 if i % 2 == 0 else 20, 1, 1)]
       for i in range(500)}


@pytest.fixture(scope="module")
def ix():
    return _pydb._memory_index({**TABLE, **ZOO})


def s(ix, expr, db=None):
    return list(search(ix, expr, db))


# ---------------------------------------------------------------- operators

@pytest.mark.parametrize("expr, expected", [
    ("APPLE", [1, 2, 3, 4, 5, 6, 8]),
    ("apple", [1, 2, 3, 4, 5, 6, 8]),          # key form: upper case
    ("BANANA", [1, 2, 3, 4, 5, 7, 8]),
    ("PEAR", []),                                # absent key
    ("APPLE + BANANA", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("APPLE+BANANA", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("APPLE * BANANA", [1, 2, 3, 4, 5, 8]),
    ("APPLE ^ BANANA", [6]),
    ("BANANA ^ APPLE", [7]),
    ("PEAR + APPLE", [1, 2, 3, 4, 5, 6, 8]),
    ("PEAR * APPLE", []),
    ("APPLE ^ PEAR", [1, 2, 3, 4, 5, 6, 8]),
    # (G): same MFN and TAG -- record 4 has them under different tags
    ("APPLE (G) BANANA", [1, 2, 3, 5, 8]),
    ("APPLE (g) BANANA", [1, 2, 3, 5, 8]),
    # (F): same occurrence -- record 3 has them in OCC 1 and 2 of tag 20
    ("APPLE (F) BANANA", [1, 2, 5, 8]),
    ("APPLE (f) BANANA", [1, 2, 5, 8]),
    # near: |dCNT| <= n; distances 0 (8), 1 (1), 2 (2), 3 (5)
    ("APPLE . BANANA", [1, 8]),
    ("BANANA . APPLE", [1, 8]),
    ("APPLE . . BANANA", [1, 2, 8]),
    ("APPLE .. BANANA", [1, 2, 8]),
    ("APPLE . . . BANANA", [1, 2, 5, 8]),
    ("APPLE . .. BANANA", [1, 2, 5, 8]),
    # exact: |dCNT| = n
    ("APPLE $ BANANA", [1]),
    ("APPLE $ $ BANANA", [2]),
    ("BANANA $ $ APPLE", [2]),
    ("APPLE $$ BANANA", [2]),
    ("APPLE $ $ $ BANANA", [5]),
    ("APPLE $ $ $ $ BANANA", []),
    ("APPLE $ $ CHERRY", [1, 6]),
    ("APPLE . APPLE", [1, 2, 3, 4, 5, 6, 8]),    # a posting is 0 from itself
    ("APPLE $ APPLE", []),
    # nested proximity: the postings of both sides carry on
    ("(APPLE . BANANA) . CHERRY", [1]),          # C3 next to B2
    ("APPLE . (BANANA . CHERRY)", [1]),
    ("(APPLE . . BANANA) $ $ $ CHERRY", [2]),    # C6 is 3 from A3
    ("(APPLE $ BANANA) $ $ CHERRY", [1]),        # C3 is 2 from A1
    ("(APPLE $ BANANA) $ $ $ CHERRY", []),
    ("(BANANA . CHERRY) $ $ APPLE", [1]),
    ("((APPLE . BANANA) . CHERRY) . APRICOT", []),
    ("(CHERRY . APRICOT) . AP", [10]),           # CHERRY1 APRICOT2 AP3
    ("(CHERRY $ $ AP) . APRICOT", [10]),
    ("(APPLE + CHERRY) (F) BANANA", [1, 2, 5, 8]),
    ("(APPLE + CHERRY) (F) APRICOT", [3, 9, 10]),  # 10: CHERRY, APRICOT in 40/1
    ("(APPLE (F) APRICOT) (G) BANANA", [3]),
    # the words
    ("APPLE AND BANANA", [1, 2, 3, 4, 5, 8]),
    ("APPLE OR BANANA", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("APPLE AND NOT BANANA", [6]),
    ("APPLE WITH BANANA", [1, 2, 5, 8]),
    ("NOT", [9]),                                # a bare NOT is a term
    ("APPLE AND NOT NOT", [1, 2, 3, 4, 5, 6, 8]),
    # the words in any case, as CISIS's gettoken reads them (cib71.c)
    ("apple and banana", [1, 2, 3, 4, 5, 8]),
    ("APPLE Or BANANA", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("apple and not banana", [6]),
    ("APPLE And Not BANANA", [6]),
    ("apple with banana", [1, 2, 5, 8]),
    ("not", [9]),
    ("apple and not not", [1, 2, 3, 4, 5, 6, 8]),
])
def test_operators(ix, expr, expected):
    assert s(ix, expr) == expected


@pytest.mark.parametrize("expr, expected", [
    # + lowest: A + (B * C)
    ("APPLE + BANANA * CHERRY", [1, 2, 3, 4, 5, 6, 8]),
    ("(APPLE + BANANA) * CHERRY", [1, 2, 6]),
    # * and ^ equal and left-associative
    ("APPLE ^ BANANA * CHERRY", [6]),
    ("APPLE ^ (BANANA * CHERRY)", [3, 4, 5, 6, 8]),
    ("APPLE * CHERRY ^ BANANA", [6]),
    ("APPLE ^ BANANA + CHERRY", [1, 2, 6, 9, 10]),
    ("APPLE ^ (BANANA + CHERRY)", []),
    # (G) above ^: A ^ (B (G) C)
    ("APPLE ^ BANANA (G) CHERRY", [3, 4, 5, 6, 8]),
    ("(APPLE ^ BANANA) (G) CHERRY", [6]),
    # (F) above (G): A (G) (B (F) APRICOT)
    ("APPLE (G) BANANA (F) APRICOT", []),
    ("(APPLE (G) BANANA) (F) APRICOT", [3]),
    # proximity above (F): (A $ $ B) (F) C
    ("APPLE $ $ BANANA (F) CHERRY", [2]),
    ("APPLE $ $ (BANANA (F) CHERRY)", [1, 2]),
    # proximity chains are left-associative
    ("APPLE . BANANA . CHERRY", [1]),
    ("(((APPLE)))", [1, 2, 3, 4, 5, 6, 8]),
])
def test_precedence(ix, expr, expected):
    assert s(ix, expr) == expected


@pytest.mark.parametrize("expr, expected", [
    ('"APPLE PIE"', [7]),
    ('"apple pie"', [7]),
    ('"A+B"', [10]),
    ('"A+B" + "APPLE PIE"', [7, 10]),
    ('"APPLE PIE"+CHERRY', [1, 2, 6, 7, 9, 10]),
    ('"NOT"', [9]),
    ('"AND"', []),
    ('"APPLE"*"BANANA"', [1, 2, 3, 4, 5, 8]),
    ('"(G)"', []),
])
def test_quoted_terms(ix, expr, expected):
    assert s(ix, expr) == expected


@pytest.mark.parametrize("expr, expected", [
    ("AP$", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),    # AP, APPLE, APPLE PIE, APRICOT
    ("APP$", [1, 2, 3, 4, 5, 6, 7, 8]),         # APPLE, APPLE PIE
    ('"APPLE "$', [7]),
    # a '$' before the closing quote truncates, as in CISIS (cib72.c)
    ('"APPLE P$"', [7]),
    ('"apple p$"', [7]),
    ('"APPLE $"', [7]),
    ('"APPLE P$"$', [7]),
    ('"A+$"', [10]),
    ('"APPLE PIE$" + CHERRY', [1, 2, 6, 7, 9, 10]),
    ("APR$", [3, 9, 10]),
    ("APRICOTS$", []),
    ("Q$", []),
    ("ap$ ^ APPLE", [7, 9, 10]),
    ("AP$ * BANANA", [1, 2, 3, 4, 5, 7, 8]),
    ("AP$ . BANANA", [1, 8]),                    # 3: BANANA is in OCC 2
    ("ZOO$", list(range(100, 150))),
    ("ZOO0$", list(range(100, 150))),            # ZOO000..ZOO099
    ("ZOO00$", list(range(100, 110))),           # ZOO000..ZOO009
    ("ZOO$/(10)", list(range(100, 150, 2))),
    ("ZOO$/(20)", list(range(101, 150, 2))),
    ("ZOO4$ ^ ZOO$/(20)", list(range(100, 150, 2))),
])
def test_truncation(ix, expr, expected):
    assert s(ix, expr) == expected


def test_truncation_uncapped():
    # 20,000 keys with one posting each, every one under the prefix
    big = {b"K%05d" % i: [(i + 1, 1, 1, 1)] for i in range(20000)}
    big[b"L"] = [(1, 1, 1, 1)]
    ix = _pydb._memory_index(big)
    assert s(ix, "K$") == list(range(1, 20001))
    assert s(ix, "K1$") == list(range(10001, 20001))
    assert s(ix, "K$ ^ K1$") == list(range(1, 10001))


@pytest.mark.parametrize("expr, expected", [
    ("APPLE/(20)", [3, 4]),
    ("APPLE /(20)", [3, 4]),
    ("APPLE / ( 20 )", [3, 4]),
    ("APPLE/(10,30)", [1, 2, 5, 6, 8]),
    ("APPLE/(30, 10)", [1, 2, 5, 6, 8]),
    ("APPLE/(99)", []),
    ("BANANA/(20)", [3]),
    ('"APPLE PIE"/(50)', [7]),
    ('"APPLE PIE" /(10)', []),
    ("AP$/(40)", [10]),
    ("AP$/(20,30)", [3, 4, 6, 9]),
    ("AP$ /(50)", [7]),
    ("APPLE/(20) (G) BANANA", [3]),
    ("APPLE/(20) * BANANA/(10)", [4]),
    ("APPLE/(10) . BANANA", [1, 8]),
    ("(APPLE/(20) + CHERRY/(20)) (F) APRICOT", [3, 9]),
])
def test_qualifiers(ix, expr, expected):
    assert s(ix, expr) == expected


# ------------------------------------------------------------ syntax errors

@pytest.mark.parametrize("expr, position, reason", [
    ("", 0, "expected a term or '(' but found the end of the expression"),
    ("   ", 3, "expected a term or '(' but found the end of the expression"),
    ("APPLE +", 7, "expected a term or '(' but found the end of the expression"),
    ("+ APPLE", 0, "expected a term or '(' but found '+'"),
    ("APPLE BANANA", 6, "expected an operator but found term 'BANANA'"),
    ("APPLE * * BANANA", 8, "expected a term or '(' but found '*'"),
    ("(APPLE", 6, "expected an operator or ')' closing the '(' at position 0"),
    ("((APPLE) + BANANA", 17, "closing the '(' at position 0"),
    ("APPLE)", 5, "found ')' without a matching '('"),
    ("()", 1, "expected a term or '(' but found ')'"),
    ('"APPLE', 0, "unterminated quoted term"),
    ('APPLE + "', 8, "unterminated quoted term"),
    ('""', 0, "empty quoted term"),
    ('"$"', 0, "empty quoted term"),
    ('"APPLE"X', 7, "after a quoted term"),
    ("APPLE .BANANA", 6, "expected an operator but found term '.BANANA'"),
    ("APPLE . $ BANANA", 8, "'.' or of '$', not both"),
    ("APPLE .$ BANANA", 6, "'.' or of '$', not both"),
    ("APPLE .) ", 6, "must be surrounded by blanks"),
    (". APPLE", 0, "expected a term or '(' but found proximity operator"),
    ("APPLE/(x)", 7, "expected a tag number in the field qualifier but found 'x'"),
    ("APPLE/()", 7, "expected a tag number"),
    ("APPLE/(10", 9, "expected ',' or ')' in the field qualifier but found the end"),
    ("APPLE/(10;20)", 9, "expected ',' or ')' in the field qualifier but found ';'"),
    ("APPLE/(0)", 7, "1..65535"),
    ("APPLE/(65536)", 7, "1..65535"),
    ("(APPLE)/(10)", 7, "a field qualifier may only follow a term"),
    ("APPLE * /(10)", 8, "expected a term or '(' but found field qualifier"),
    ("#1", 0, "references to earlier results"),
    ("APPLE + #1", 8, "references to earlier results"),
    ("APPLE AND", 9, "expected a term or '('"),
    ("APPLE (G)", 9, "expected a term or '('"),
    ("caf\u00e9 caf\u00e9", 5, "expected an operator but found term"),  # characters, not bytes
    # the '(' named in characters too (it was its UTF-8 byte offset, 9; a review)
    ("\u00e9\u00e9\u00e9 + (AA BB", 10, "closing the '(' at position 6 but found term 'BB'"),
    # ...and only that one: the term it quotes is the user's text (the code review)
    ('\u00e7\u00e7\u00e7 + (AA "at position 8"', 10,
     "at position 6 but found term '\"at position 8\"'"),
])
def test_syntax_errors(ix, expr, position, reason):
    with pytest.raises(SearchSyntaxError) as ei:
        search(ix, expr)
    assert ei.value.position == position, ei.value
    assert reason in ei.value.reason, ei.value.reason
    assert isinstance(ei.value, ValueError)
    assert f"(at position {position})" in str(ei.value)


def test_limits(ix):
    deep = "(" * 100 + "APPLE" + ")" * 100
    assert s(ix, deep) == [1, 2, 3, 4, 5, 6, 8]
    with pytest.raises(SearchSyntaxError) as ei:
        search(ix, "(" * 101 + "APPLE" + ")" * 101)
    assert ei.value.position == 100 and "deeper than 100" in ei.value.reason
    # a hostile depth does not recurse without bound
    with pytest.raises(SearchSyntaxError):
        search(ix, "(" * 1_000_000)
    with pytest.raises(SearchSyntaxError) as ei:
        search(ix, "A" * 65537)
    assert ei.value.position == 65536 and "65536" in ei.value.reason
    # a long flat chain is fine (no recursion per operand)
    chain = " + ".join(["APPLE", "BANANA"] * 3500)
    assert len(chain.encode()) <= 65536
    assert s(ix, chain) == [1, 2, 3, 4, 5, 6, 7, 8]
    chain = " . ".join(["APPLE"] * 8000)
    assert s(ix, chain) == [1, 2, 3, 4, 5, 6, 8]


# --------------------------------------------------------- LIND-like caps

@pytest.mark.parametrize("caps", ["", "cnt"])
@pytest.mark.parametrize("expr, what", [
    ("APPLE (G) BANANA", "'(G)' at byte offset 6 needs the TAG"),
    ("APPLE (F) BANANA", "'(F)' at byte offset 6 needs the TAG"),
    ("APPLE WITH BANANA", "'(F)' at byte offset 6 needs the TAG"),
    ("APPLE . BANANA", "proximity '.' at byte offset 6 needs the TAG"),
    ("APPLE $ $ BANANA", "proximity '$' at byte offset 6 needs the TAG"),
    ("APPLE/(10)", "a field qualifier at byte offset 5 needs the TAG"),
    ("PEAR + AP$/(10)", "a field qualifier at byte offset 10 needs the TAG"),
])
def test_lind_caps_refuse_positional_operators(caps, expr, what):
    ix = _pydb._memory_index(TABLE, caps=caps)
    with pytest.raises(UnsupportedError) as ei:
        search(ix, expr)
    assert what in str(ei.value) and "docs/isis-formats.md §4.7" in str(ei.value)
    # no system call failed: errno 0, and no "[Errno 0]" before the message
    assert ei.value.errno == 0 and str(ei.value) == ei.value.strerror


@pytest.mark.parametrize("expr, position", [
    ("APPLE/(abc)", 7),                 # the qualifier's tag
    ("APPLE (G) BANANA)", 16),          # a ')' after the operator
    ("APPLE (F) BANANA +", 18),
    ("APPLE . BANANA BANANA", 15),
])
def test_lind_caps_a_syntax_error_is_reported_first(expr, position):
    """On an index that cannot evaluate an operator, a syntax error
    anywhere in the expression is what is reported (the unsupported
    operator came first: a librarian's trial, on a LIND index)."""
    ix = _pydb._memory_index(TABLE, caps="")
    with pytest.raises(SearchSyntaxError) as ei:
        search(ix, expr)
    assert ei.value.position == position


def test_lind_caps_boolean_and_missing_occ():
    ix = _pydb._memory_index(TABLE, caps="")
    assert ix.caps == {"tag": False, "occ": False, "cnt": False}
    assert ix.postings(b"APPLE")[:2] == [(1, 0, 0, 0), (2, 0, 0, 0)]
    assert s(ix, "APPLE * BANANA ^ CHERRY") == [3, 4, 5, 8]
    assert s(ix, "AP$ + \"A+B\"") == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    tag_only = _pydb._memory_index(TABLE, caps="tag")
    assert s(tag_only, "APPLE (G) BANANA") == [1, 2, 3, 5, 8]
    assert s(tag_only, "APPLE/(20)") == [3, 4]
    with pytest.raises(UnsupportedError, match="needs the OCC"):
        search(tag_only, "APPLE (F) BANANA")
    no_cnt = _pydb._memory_index(TABLE, caps="tag,occ")
    assert s(no_cnt, "APPLE (F) BANANA") == [1, 2, 5, 8]
    with pytest.raises(UnsupportedError, match="needs the CNT"):
        search(no_cnt, "APPLE . BANANA")


# ------------------------------------------------------- the memory index

def test_memory_index_handle():
    ix = _pydb._memory_index({b"b": [(3, 1, 1, 2), (1, 5, 1, 1), (3, 1, 1, 2)],
                              b"A": [(2, 1, 1, 1)], b"AB": [(9, 9, 9, 9)]})
    assert ix.kind == "memory"
    assert ix.caps == {"tag": True, "occ": True, "cnt": True}
    assert ix.terms() == [(b"A", 1), (b"AB", 1), (b"b", 2)]
    assert ix.terms(b"A") == [(b"A", 1), (b"AB", 1)]
    assert ix.terms(b"", b"AA") == [(b"AB", 1), (b"b", 2)]
    assert ix.postings(b"b") == [(1, 5, 1, 1), (3, 1, 1, 2)]     # sorted, distinct
    assert ix.postings(b"B") == []
    assert ix.key(b"caf\xc3\xa9 x") == b"CAF\xc3\xa9 X"          # ASCII only
    assert s(ix, "b") == [1, 3]                # held as given: looked up as stored
    assert s(ix, "b$") == []                                      # key form B
    with pytest.raises(ValueError, match="MFN"):
        _pydb._memory_index({b"A": [(0, 1, 1, 1)]})
    with pytest.raises(ValueError, match="caps"):
        _pydb._memory_index({}, caps="tag,mfn")
    with pytest.raises(TypeError):
        _pydb._memory_index({"A": [(1, 1, 1, 1)]})
    with pytest.raises(TypeError):
        _pydb._memory_index({b"A": [(1, 1, 1)]})
    ix.close()
    with pytest.raises(ClosedError):
        search(ix, "A")


# ------------------------------------------------- results and deletions

def _db_with_deletions(tmp_path):
    """Ten records; MFN 3 logically deleted, MFN 5 physically deleted by
    rewriting their XRF entries (docs/isis-formats.md §3.2: negated pointer;
    -2048)."""
    base = tmp_path / "fruit"
    recs = [[(10, f"record {i}".encode())] for i in range(1, 11)]
    assert _pydb._build(str(base), "isis-packed", 0, recs, True) == 10
    with pydb.open(base) as db:
        raw3 = db.xrf_entry(3)["raw"]
    with open(str(base) + ".xrf", "r+b") as f:
        f.seek(4 + 2 * 4)
        f.write(struct.pack("<i", -raw3))
        f.seek(4 + 4 * 4)
        f.write(struct.pack("<i", -2048))
    return base


def test_deleted_records_dropped(tmp_path, ix):
    base = _db_with_deletions(tmp_path)
    with pydb.open(base, io="pread") as db:   # sees the XRF rewrites below
        assert db.xrf_entry(3)["state"] == "logically deleted"
        assert db.xrf_entry(5)["state"] == "physically deleted"
        assert s(ix, "APPLE") == [1, 2, 3, 4, 5, 6, 8]
        assert s(ix, "APPLE", db) == [1, 2, 4, 6, 8]
        assert s(ix, "APPLE ^ BANANA", db) == [6]
        # postings above the highest MFN (a stale index) are dropped too
        assert s(ix, "ZOO$ + CHERRY", db) == [1, 2, 6, 9, 10]
        r = search(ix, "AP$ ^ \"APPLE PIE\"", db)
        assert isinstance(r, SearchResult) and r.db is db
        assert list(r) == [1, 2, 4, 6, 8, 9, 10] and len(r) == 7
        assert r[0] == 1 and r[-1] == 10 and r[1:3] == [2, 4]
        assert 4 in r and 3 not in r and 11 not in r and "4" not in r
        assert r == [1, 2, 4, 6, 8, 9, 10]
        recs = r.records()
        first = next(recs)
        assert first.mfn == 1 and first[10] == ["record 1"]
        assert [x.mfn for x in recs] == [2, 4, 6, 8, 9, 10]
        assert re.match(r"<SearchResult 'AP\$ \^ \"APPLE PIE\"': 7 MFNs \[1, 2, 4", repr(r))
        assert r.mfns == (1, 2, 4, 6, 8, 9, 10) and r.mfns is r.mfns
        assert r[-7] == 1 and r[::3] == [1, 6, 10] and r[5:] == [9, 10]
        with pytest.raises(IndexError):
            r[7]
        assert r == SearchResult("other", [1, 2, 4, 6, 8, 9, 10]) and r != [1, 2]
        assert r.index(8) == 4 and r.count(9) == 1 and list(reversed(r))[0] == 10
        # the core's packed form: 4 native-endian bytes per MFN, no ints made
        raw = _pydb._search(ix, "AP$ ^ \"APPLE PIE\"", db)
        assert raw == struct.pack("=7i", 1, 2, 4, 6, 8, 9, 10)
        assert SearchResult("x", raw) == r and len(SearchResult("x", b"")) == 0
        # batches, and a record physically deleted after the search
        r = search(ix, "APPLE + BANANA", db)
        assert [x.mfn for x in r.records(batch=3)] == [1, 2, 4, 6, 7, 8]
        raw4 = db.xrf_entry(4)["raw"]
        _xrf_put(base, 4, -2048)
        assert [x.mfn for x in r.records(batch=2)] == [1, 2, 6, 7, 8]
        _xrf_put(base, 4, -raw4)
        assert [(x.mfn, x.deleted) for x in r.records()][2] == (4, True)
        with pytest.raises(ValueError, match="batch"):
            r.records(batch=0)
    with pytest.raises(ValueError, match="no database"):
        search(ix, "APPLE").records()
    with pytest.raises(ClosedError):
        search(ix, "APPLE", db)
    with pytest.raises(TypeError):
        search(ix, "APPLE", "not a database")


def _xrf_put(base, mfn, raw):
    """Overwrite the XRF entry of `mfn` (docs/isis-formats.md §3.1)."""
    with open(str(base) + ".xrf", "r+b") as f:
        f.seek(((mfn - 1) // 127) * 512 + 4 + ((mfn - 1) % 127) * 4)
        f.write(struct.pack("<i", raw))


def test_deleted_records_dense_and_sparse(tmp_path):
    """Dense results are checked by a scan of the XRF, sparse ones entry
    by entry (csrc/search_eval.c drop_inactive); both give the same answer."""
    base = tmp_path / "many"
    _pydb._build(str(base), "isis-packed", 0, [[(1, b"r%d" % i)] for i in range(300)], True)
    with pydb.open(base) as db:
        raw = {m: db.xrf_entry(m)["raw"] for m in (3, 250)}
    _xrf_put(base, 3, -raw[3])
    _xrf_put(base, 250, -raw[250])
    _xrf_put(base, 5, -2048)
    ix = _pydb._memory_index({
        b"DENSE": [(m, 1, 1, 1) for m in range(1, 311)],       # 301..310: no record
        b"SPARSE": [(m, 1, 1, 1) for m in (3, 5, 7, 250, 299, 400)],
        b"HALF": [(m, 1, 1, 1) for m in range(2, 311, 2)],
    })
    with pydb.open(base, io="pread") as db:
        active = set(db.mfns())
        assert active == set(range(1, 301)) - {3, 5, 250}
        assert s(ix, "DENSE", db) == sorted(active)
        assert s(ix, "SPARSE", db) == [7, 299]
        assert s(ix, "HALF", db) == [m for m in range(2, 301, 2) if m != 250]
        assert s(ix, "DENSE ^ HALF", db) == [m for m in range(1, 301, 2) if m not in (3, 5)]


def test_expression_encoding(tmp_path):
    """With a database, the expression is encoded with its encoding."""
    ix = _pydb._memory_index({"CAFÉ".encode("cp850"): [(1, 1, 1, 1)],
                              "CAFÉ".encode(): [(2, 1, 1, 1)]})
    base = tmp_path / "enc"
    _pydb._build(str(base), "isis-packed", 0, [[(1, b"x")], [(1, b"y")]], True)
    with pydb.open(base, encoding="cp850") as db:
        assert s(ix, "CAFÉ", db) == [1]
        with pytest.raises(SearchSyntaxError) as ei:
            search(ix, "CAFÉ CAFÉ", db)
        assert ei.value.position == 5
        with pytest.raises(UnicodeEncodeError):
            search(ix, "\u4e2d", db)
    assert s(ix, "CAFÉ") == [2]


def test_capitals_a_code_page_lacks_are_looked_up_in_lower_case(tmp_path):
    """Code page 437 (DOS CDS/ISIS) holds ï and é but not Ï and É: NAÏVE
    and CAFÉ, which keys fold anyway, find what naïve and café find, in
    searches, key lookups and a snapshot's search; a character with no
    form in the code page is still a UnicodeEncodeError."""
    base = tmp_path / "dos"
    with pydb.create(base, encoding="cp437", fst="1 4 v1\n", gc="none") as db:
        db.append([(1, "naïve café")])
        db.append([(1, "other")])
    with pydb.open(base, encoding="cp437") as db:
        assert [list(db.search(q)) for q in ("NAÏVE", "naïve", "Naïve", "CAFÉ * NAÏVE")] \
            == [[1]] * 4
        assert db.index.key("NAÏVE") == db.index.key("naïve") == b"NAIVE"
        assert db.index.postings("CAFÉ") == db.index.postings("café") != []
        with db.snapshot() as snap:
            assert list(snap.search("NAÏVE")) == [1]
        # a TermEncodeError (a pydb.Error and a UnicodeEncodeError) naming
        # the expression as given, the character and the encoding
        with db.snapshot() as snap:
            calls = (lambda: db.search("NAÏVE \u4e2d"),
                     lambda: db.index.postings("NAÏVE \u4e2d"),
                     lambda: snap.search("NAÏVE \u4e2d"))
            errors = []
            for call in calls:
                with pytest.raises(pydb.TermEncodeError) as ei:
                    call()
                errors.append(ei.value)
        for e in errors:
            assert isinstance(e, UnicodeEncodeError) and isinstance(e, pydb.Error)
            assert (e.encoding, e.object, e.start, e.end) == ("cp437", "NAÏVE \u4e2d", 6, 7)
            assert str(e).startswith("'NAÏVE \u4e2d': '\u4e2d' (character 6) cannot be "
                                     "written in the database's encoding 'cp437'")
            assert isinstance(e.__cause__, UnicodeEncodeError)
    assert fit_case("NAÏVE \u4e2d", "cp437") == "NAïVE \u4e2d"


# -------------------------------------------------- real data: the CDS sample

CDS_STOP = set(b"A AN AND AS BY FOR FROM IN INTO ITS OF ON THE TO UPON WITH".split())


def _cds_index(db):
    """An in-memory index of the CDS sample following its FST
    (db/cds.fst: ``70 0 MHU,(V70/)``, ``24 4 MHU,V24``, ``69 2 V69``;
    docs/isis-formats.md §5.2) and stop words, written out by hand for these
    three lines only: 70 = each author one key, OCC per occurrence;
    24 = letter runs, stop words skipped but counted; 69 = each <term>."""
    table: dict[bytes, list] = {}
    for r in db:
        for occ, v in enumerate(r.raw(70), 1):
            table.setdefault(v.upper().strip(), []).append((r.mfn, 70, occ, 1))
        for occ, v in enumerate(r.raw(24), 1):
            for cnt, m in enumerate(re.finditer(rb"[A-Za-z]+", v), 1):
                if m.group().upper() not in CDS_STOP:
                    table.setdefault(m.group().upper(), []).append((r.mfn, 24, occ, cnt))
        for occ, v in enumerate(r.raw(69), 1):
            for cnt, m in enumerate(re.finditer(rb"<([^>]*)>", v), 1):
                table.setdefault(m.group(1).upper().strip(), []).append((r.mfn, 69, occ, cnt))
    return _pydb._memory_index(table)


@pytest.mark.parametrize("expr, expected", [
    # checked against the CISIS text dump db/cds.txt (docs/isis-formats.md §8):
    # 24 "...measurement of transpiration...", "...and transpiration"
    ("TRANSPIRATION", [1, 2]),
    ("MEASUREMENT $ $ TRANSPIRATION", [1]),     # OF (a stop word) between
    ("MEASUREMENT $ TRANSPIRATION", []),
    ("PLANT . CHAMBER", [2, 3]),                # "the plant chamber"
    ('"PLANT TRANSPIRATION"', [1, 4, 5, 8, 19, 23]),
    ('"plant transpiration" ^ TRANSPIRATION', [4, 5, 8, 19, 23]),
    ("BOSIAN$", [2, 3]),                        # 70 "Bosian, G."
    ('"BOSIAN, G."/(70)', [2, 3]),
    ("WATER * SOIL$/(69)", [5]),
    ("PLANT$/(69)", list(range(1, 20)) + [21, 22, 23, 24, 25, 26, 54, 62, 69, 80]),
])
def test_cds_sample(isis_data, expr, expected):
    with pydb.open(isis_data / "scieloorg__pyisis/db/cds", encoding="cp850") as db:
        assert len(db) == 150
        ix = _cds_index(db)
        assert s(ix, expr, db) == expected


# ------------------------------------------- brute-force reference model

def _key_form(term: str) -> bytes:
    b = term.encode()
    return bytes(c - 32 if 97 <= c <= 122 else c for c in b)


def ref_eval(node, table):
    """The semantics of the DESIGN note 3 of csrc/search_eval.c, by brute force on
    sets of postings."""
    kind = node[0]
    if kind == "term":
        _, term, trunc, tags = node
        key = _key_form(term)
        if trunc:
            out = {p for k, v in table.items() if k.startswith(key) for p in v}
        else:
            out = set(table.get(key, ()))
        if tags:
            out = {p for p in out if p[1] in tags}
        return out
    _, op, n, left, right = node
    a, b = ref_eval(left, table), ref_eval(right, table)
    ma, mb = {p[0] for p in a}, {p[0] for p in b}
    if op == "+":
        return a | b
    if op == "*":
        return {p for p in a | b if p[0] in ma and p[0] in mb}
    if op == "^":
        return {p for p in a if p[0] not in mb}
    if op in ("(G)", "(F)"):
        k = 2 if op == "(G)" else 3
        ka, kb = {p[:k] for p in a}, {p[:k] for p in b}
        return {p for p in a if p[:k] in kb} | {p for p in b if p[:k] in ka}

    def ok(p, q):
        d = abs(p[3] - q[3])
        return p[:3] == q[:3] and (d <= n if op == "." else d == n)
    return ({p for p in a if any(ok(p, q) for q in b)}
            | {q for q in b if any(ok(p, q) for p in a)})


def render(node) -> str:
    """Fully parenthesised text of a tree."""
    if node[0] == "term":
        _, term, trunc, tags = node
        text = f'"{term}"' if " " in term or "+" in term else term
        text += "$" if trunc else ""
        if tags:
            text += "/(" + ",".join(map(str, tags)) + ")"
        return text
    _, op, n, left, right = node
    sym = " ".join(op * n) if op in ".$" else op
    return f"({render(left)} {sym} {render(right)})"


TERMS = ["APPLE", "banana", "CHERRY", "APRICOT", "AP", "APPLE PIE", "A+B",
         "PEAR", "ZOO01", "Z"]
term_nodes = st.builds(
    lambda t, trunc, tags: ("term", t, trunc, tags),
    st.sampled_from(TERMS), st.booleans(),
    st.one_of(st.just(()), st.lists(st.sampled_from([10, 20, 30, 40, 50, 99]),
                                     min_size=1, max_size=3).map(tuple)))


def tree_strategy(terms, max_n: int, max_leaves: int):
    """Search trees of render()'s shape over the `terms` strategy: every
    operator, proximity counts 1..max_n."""
    return st.recursive(
        terms,
        lambda sub: st.builds(lambda op, n, left, r: ("op", op, n, left, r),
                              st.sampled_from(["+", "*", "^", "(G)", "(F)", ".", "$"]),
                              st.integers(1, max_n), sub, sub),
        max_leaves=max_leaves)


trees = tree_strategy(term_nodes, 4, 8)

EXAMPLES = hypothesis_examples(300)
HYP = settings(max_examples=EXAMPLES, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


def _mfns(postings):
    return sorted({p[0] for p in postings})


@HYP
@given(tree=trees)
def test_matches_reference_model(ix, tree):
    table = {**TABLE, **ZOO}
    assert s(ix, render(tree)) == _mfns(ref_eval(tree, table))


# Trees of '+', '*' and '^' only: pydb_search evaluates them on MFN sets
# (search_eval.c section 6: no posting lists merged); the model is the same.
bool_trees = st.recursive(
    term_nodes,
    lambda sub: st.builds(lambda op, left, r: ("op", op, 1, left, r),
                          st.sampled_from(["+", "*", "^"]), sub, sub),
    max_leaves=10)


@HYP
@given(tree=bool_trees)
def test_boolean_trees_match_reference_model(ix, tree):
    table = {**TABLE, **ZOO}
    assert s(ix, render(tree)) == _mfns(ref_eval(tree, table))


def test_mfn_sets_sparse_and_dense():
    """A truncation's MFNs reduced through a bitmap (dense range) and by
    sorting (a range of more than 64 MFNs per posting), with MFNs up to
    2^31 - 1, repeated MFNs, several postings per MFN and key."""
    far = {b"FAR%d" % i: [(m, 10, 1, 1), (m, 20, 1, 2)]
           for i, m in enumerate([2**31 - 1, 7, 1_000_000, 7, 3, 2**31 - 2])}
    near = {b"NEAR%03d" % i: [(1 + (i * 7) % 100, 10, 1, 1)] for i in range(300)}
    mix = _pydb._memory_index({**far, **near})
    assert s(mix, "FAR$") == [3, 7, 1_000_000, 2**31 - 2, 2**31 - 1]
    assert s(mix, "NEAR$") == list(range(1, 101))
    assert s(mix, "FAR$ + NEAR$") == sorted({3, 7, 1_000_000, 2**31 - 2, 2**31 - 1}
                                              | set(range(1, 101)))
    assert s(mix, "NEAR$ * FAR$") == [3, 7]
    assert s(mix, "NEAR$ ^ FAR$") == [m for m in range(1, 101) if m not in (3, 7)]
    assert s(mix, "FAR$/(20) ^ NEAR$") == [1_000_000, 2**31 - 2, 2**31 - 1]
    # the same answers through posting lists (a positional operator
    # anywhere keeps the whole expression on postings)
    assert s(mix, "(FAR$ (G) FAR$) + NEAR$") == s(mix, "FAR$ + NEAR$")


@HYP
@given(a=trees, b=trees, c=trees)
def test_boolean_identities(ix, a, b, c):
    A, B, C = (f"({render(x)})" for x in (a, b, c))
    def q(e):
        return s(ix, e)
    assert q(f"{A} + {B}") == q(f"{B} + {A}")
    assert q(f"{A} * {B}") == q(f"{B} * {A}")
    assert q(f"{A} * ({B} + {C})") == q(f"{A} * {B} + {A} * {C}")
    assert q(f"{A} + {B} * {C}") == q(f"({A} + {B}) * ({A} + {C})")
    assert q(f"({A} * {B}) * {C}") == q(f"{A} * ({B} * {C})")
    assert q(f"{A} ^ {A}") == []
    assert q(f"{A} * {A}") == q(A) == q(f"{A} + {A}")
    assert q(f"{A} ^ ({B} + {C})") == q(f"{A} ^ {B} ^ {C}")
    assert q(f"{A} ^ {B} + {A} * {B}") == q(A)
    sa, sb = set(q(A)), set(q(B))
    assert q(f"{A} + {B}") == sorted(sa | sb)
    assert q(f"{A} * {B}") == sorted(sa & sb)
    assert q(f"{A} ^ {B}") == sorted(sa - sb)
    # positional results are subsets of the AND
    for op in ("(G)", "(F)", ".", "$ $"):
        assert set(q(f"{A} {op} {B}")) <= sa & sb


TOKENS = ["APPLE", "AP$", " ", "+", "*", "^", "(", ")", "(G)", "(F)", " . ",
          " $ ", ".", "$", '"', "/(", "10", ",", "AND", "NOT", "#", "\u00e9",
          "\x00", "/", "OR", "WITH", "  "]


@HYP
@given(st.lists(st.sampled_from(TOKENS), max_size=30))
def test_random_text_never_crashes(ix, parts):
    expr = "".join(parts)
    try:
        r = s(ix, expr)
    except SearchSyntaxError as e:
        assert 0 <= e.position <= len(expr)
    else:
        assert r == sorted(set(r)) and set(r) <= set(range(1, 150))


@HYP
@given(st.text(max_size=60))
def test_arbitrary_text_never_crashes(ix, expr):
    try:
        s(ix, expr)
    except SearchSyntaxError as e:
        assert 0 <= e.position <= len(expr)


def test_every_operator_pair_against_model(ix):
    """Each pair of operators, with and without parentheses, against the
    reference model (exhaustive on three terms)."""
    table = {**TABLE, **ZOO}
    ops = [("+", 1), ("*", 1), ("^", 1), ("(G)", 1), ("(F)", 1), (".", 1),
           (".", 2), ("$", 1), ("$", 2), ("$", 3)]
    t = [("term", "APPLE", False, ()), ("term", "BANANA", False, ()),
         ("term", "CHERRY", False, ())]
    for (o1, n1), (o2, n2) in product(ops, ops):
        left = ("op", o1, n1, ("op", o2, n2, t[0], t[1]), t[2])
        right = ("op", o1, n1, t[0], ("op", o2, n2, t[1], t[2]))
        for tree in (left, right):
            assert s(ix, render(tree)) == _mfns(ref_eval(tree, table)), render(tree)


def test_threads_share_an_index(ix):
    """Searches run with the GIL released on one index from many threads;
    close() waits for those in flight, later ones raise ClosedError."""
    local = _pydb._memory_index({**TABLE, **ZOO})
    exprs = {"AP$ * BANANA": [1, 2, 3, 4, 5, 7, 8], "ZOO$/(10)": list(range(100, 150, 2)),
             "(APPLE . . BANANA) $ $ $ CHERRY": [2]}
    errors, closed = [], []
    start = threading.Barrier(8)

    def worker(k):
        start.wait()
        for i in range(300):
            e = list(exprs)[(i + k) % 3]
            try:
                got = s(local, e)
            except ClosedError:
                closed.append(k)
                return
            if got != exprs[e]:
                errors.append((e, got))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads[:4]:
        t.join()
    local.close()
    for t in threads[4:]:
        t.join()
    assert errors == []
    with pytest.raises(ClosedError):
        search(local, "APPLE")


@pytest.mark.parametrize("expr, expected", [
    ("TRANSPIRATION", [1, 2]),
    ("MEASUREMENT $ $ TRANSPIRATION", [1]),
    ("MEASUREMENT $ TRANSPIRATION", []),
    ("PLANT . CHAMBER", [2, 3]),
    ('"PLANT TRANSPIRATION"', [1, 4, 5, 8, 19, 23]),
    ('"plant transpiration" ^ TRANSPIRATION', [4, 5, 8, 19, 23]),
    ("BOSIAN$", [2, 3]),
    ('"BOSIAN, G."/(70)', [2, 3]),
    ("WATER * SOIL$/(69)", [5]),
    ("PLANT$/(69)", list(range(1, 20)) + [21, 22, 23, 24, 25, 26, 54, 62, 69, 80]),
])
def test_cds_sample_shipped_index(isis_data, expr, expected):
    """The same queries through db.search() on the inverted file CISIS
    shipped with the sample (classic 10/30, docs/isis-formats.md §4) give the
    MFNs worked out from the records above."""
    with pydb.open(isis_data / "scieloorg__pyisis/pyisis/pyisis/sample/cds",
                   encoding="cp850") as db:
        assert db.index.kind == "isis-classic"
        result = db.search(expr)
        assert list(result) == expected
        assert [r.mfn for r in result.records()] == expected


def test_keys_from_terms_are_searchable_and_keys_are_str_or_bytes(isis_data):
    """A key read from terms() (surrogate-escaped bytes that are not valid
    in the encoding) can be searched as it came; an int key is a TypeError,
    not bytes(n)."""
    odds = isis_data / "ABCD-DEVCOM__ABCD2/www/bases-examples_Windows/odds/data/odds"
    with pydb.open(odds) as db:
        bad = next(t for t in db.terms() if any(0xDC80 <= ord(c) <= 0xDCFF for c in t.key))
        result = db.search(f'"{bad.key}"')
        assert len(result) == len({p.mfn for p in db.postings(bad.key, raw=True)} & set(db.mfns()))
        with pytest.raises(TypeError):
            db.postings(5)
        with pytest.raises(TypeError):
            list(db.terms(5))


def test_a_term_past_ascii_in_another_encoding_than_the_keys_is_refused(tmp_path):
    """A native index built in one encoding, searched through a handle of
    the other kind (single-byte keys, UTF-8 handle, or the other way
    round): a term past ASCII raises UnsupportedError naming the cause;
    before, it silently matched nothing (a review).  ASCII terms and the
    right encoding answer as before."""
    for enc, other in (("latin-1", "utf-8"), ("utf-8", "cp1252")):
        base = tmp_path / enc
        with pydb.create(base, encoding=enc, fst="1 4 v1\n") as db:
            db.append([(1, "SAÚDE publica")])
            db.append([(1, "saude NIÑOS")])
        with pydb.open(base, encoding=enc) as db:
            assert list(db.search("SAÚDE")) == [1, 2] and list(db.search("NIÑOS")) == [2]
        with pydb.open(base, encoding=other) as db:
            assert list(db.search("SAUDE + PUBLICA")) == [1, 2]
            with pytest.raises(pydb.UnsupportedError, match=f"encoded with {other}"):
                db.search("SAÚDE")
            with db.snapshot() as snap, pytest.raises(pydb.UnsupportedError):
                snap.search("SAÚDE")
        with pydb.open_index(base, encoding=other) as ix:
            with pytest.raises(pydb.UnsupportedError, match="could match no key"):
                ix.search("NIÑOS")


def test_the_lilacs_sample_searched_with_its_detected_encoding(tmp_path):
    """lilacs (Latin-1, written by CISIS) with a native index: accented
    terms find their records with encoding="auto", and are refused with
    the default UTF-8 (they found nothing, silently)."""
    import shutil

    from conftest import SAMPLE, need
    src = need(SAMPLE + "lilacs")
    for ext in ("mst", "xrf"):
        shutil.copy(f"{src}.{ext}", tmp_path)
    base = tmp_path / "lilacs"
    pydb.build_index(base, fst="12 4 v12\n")
    with pydb.open(base, encoding="auto") as db:
        assert db.encoding == "latin-1"
        assert (len(db.search("SAÚDE")), len(db.search("NIÑOS"))) == (62, 38)
        assert "SAÚDE".encode("latin-1") == b"SA\xdaDE"
    with pydb.open(base) as db:
        with pytest.raises(pydb.UnsupportedError):
            db.search("SAÚDE")
        # a value read with the default UTF-8 under surrogateescape holds
        # its bytes past ASCII as lone surrogates: searched as read, it
        # matches as before (the code review)
        assert len(db.search("SA\udcdaDE")) == 62


def test_a_search_expression_that_is_not_a_str_is_a_type_error(tmp_path):
    """db.search(5), a snapshot's and an Index's search of a non-str are
    TypeError naming the type (5 and None were AttributeError from
    inside the key-encoding check: a service developer's trial)."""
    with pydb.create(tmp_path / "x", fst="24 4 v24\n") as db:
        db.append([(24, "a")])
        with db.snapshot() as snap:
            for search in (db.search, snap.search, db.index.search):
                for bad, name in ((5, "int"), (None, "NoneType"), (b"A", "bytes")):
                    with pytest.raises(TypeError, match=f"a search expression is a str, "
                                                        f"not {name}"):
                        search(bad)
                assert list(search("A")) == [1]
