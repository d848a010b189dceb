"""The synthetic unesb: its shape, and the ``Z`` prefix of its FST
(409 terms, 4205 postings at scale 1, docs/experiments.md §1), evaluated both
by a small pure-Python reading of just that FST rule (docs/isis-formats.md §5)
and by the native index built from the whole FST (pydb.build_index), which
must agree posting for posting."""

import re
from collections import Counter

import pytest

import pydb
from pydb import unesb

TECHNIQUE_BASE = {5: 1, 6: 2, 7: 3, 8: 4}


def z_rule(fst_text):
    """The FST line whose keys carry the prefix Z: (id, technique, tag)."""
    for line in fst_text.splitlines():
        m = re.match(r"\s*(\d+)\s+(\d+)\s+'(.)([^']*)\3'(v(\d+))\s*$", line)
        if m and m.group(4) == "Z":
            return int(m.group(1)), int(m.group(2)), int(m.group(6))
    raise AssertionError("no Z prefix rule in the FST")


def z_postings(base):
    """Postings (key, mfn, tag, occ, cnt) of the Z rule over every record:
    technique 6 = technique 2 (each <...> term of the field's value, CNT
    +1 per term) with the literal's text as prefix; keys upper-cased, cut
    to 30 bytes, blanks trimmed, empty keys dropped (docs/isis-formats.md
    §5.2-5.5)."""
    fst = base.with_suffix(".fst").read_text(encoding="ascii")
    fst_id, technique, tag = z_rule(fst)
    assert TECHNIQUE_BASE[technique] == 2
    out = []
    with pydb.open(base) as db:
        for rec in db:
            value = "".join(rec[tag])          # vTAG: all occurrences, one line
            if not value:
                continue
            cnt = 0
            for term in re.findall(r"<([^>]*)>", value):
                key = ("Z" + term).upper()[:30].strip()
                cnt += 1
                if key:
                    out.append((key, rec.mfn, fst_id, 1, cnt))
    return out


@pytest.fixture(scope="module")
def scale1(unesb_cache):
    """The default database (scale 1, seed 1, with its native index)."""
    return unesb.default_database(cache_dir=unesb_cache)


def test_z_prefix_matches_the_original_at_scale_1(scale1):
    postings = z_postings(scale1)
    terms = Counter(p[0] for p in postings)
    assert len(terms) == 409
    assert len(postings) == 4205
    assert len(set(postings)) == 4205 and len({(p[0], p[1]) for p in postings}) == 4205
    # long-tailed: the commonest term has far more postings than the median one
    counts = sorted(terms.values(), reverse=True)
    assert counts[0] > 10 * counts[len(counts) // 2]
    with pydb.open(scale1) as db:
        assert len(db) == db.max_mfn == 58_880


def test_z_prefix_grows_with_the_database(tmp_path):
    assert unesb.z_counts(58_880) == (409, 4205)
    assert unesb.z_counts(2 * 58_880) == (578, 8410)      # round(409 * sqrt 2)
    assert unesb.z_counts(10 * 58_880) == (1293, 42050)
    for n in (3_000, 12_000):
        base = unesb.generate(tmp_path / str(n), count=n)
        postings = z_postings(base)
        assert (len({p[0] for p in postings}), len(postings)) == unesb.z_counts(n)


def test_shape_of_the_records(scale1):
    with pydb.open(scale1) as db:
        tags = Counter()
        repeated = 0
        langs = Counter()
        years = set()
        for rec in db.read_many(range(1, 5001)):
            tags.update(set(rec.tags))
            repeated += len(rec[70]) > 1
            langs[rec.get(40)] += 1
            years.add(int(rec.subfields(26)[0]["c"]))
            assert rec[24] and rec.get(30).startswith("^a")
            assert all(v.startswith("<") and v.endswith(">") for v in rec[69])
    assert set(tags) == {24, 26, 30, 40, 44, 50, 69, 70, 71, 76}
    assert tags[24] == tags[26] == tags[69] == 5000
    assert 0.2 < tags[71] / 5000 < 0.4 and 0.02 < tags[76] / 5000 < 0.08
    assert repeated > 1000                              # personal authors repeat
    assert langs.most_common(1)[0][0] == "en" and len(langs) == 8
    assert min(years) >= 1946 and max(years) <= 2005


def test_fst_file_is_written(tmp_path):
    base = unesb.generate(tmp_path, count=300)
    assert base.with_suffix(".fst").read_text() == unesb.FST
    assert z_rule(unesb.FST) == (76, 6, 76)


def test_native_index_z_prefix_is_the_original(scale1):
    # The default database carries its native index, built from the whole
    # FST: its Z range holds exactly the keys of the '/Z/' line (no other
    # line makes a key starting with Z), 409 keys and 4,205 postings, and
    # they are the postings the pure-Python reading of that line gives.
    assert (scale1.parent / "complete").read_text() == f"generator {unesb.GENERATOR_VERSION}\n"
    with pydb.open_index(scale1) as ix:
        terms = list(ix.terms("Z"))
        got = sorted((t.key, *p) for t in terms for p in ix.postings(t.key))
    assert len(terms) == 409
    assert sum(t.count for t in terms) == len(got) == 4205
    assert got == sorted(z_postings(scale1))
    assert max(p[1] for p in got) == 58_875
    assert {p[2] for p in got} == {76}


def test_no_word_starts_with_z():
    import random
    rng = random.Random(5)
    assert not any(unesb._word(rng).startswith("z") for _ in range(10_000))


def test_generate_with_index(tmp_path):
    base = unesb.generate(tmp_path, count=3_000, index=True)
    with pydb.open_index(base) as ix:
        terms = list(ix.terms("Z"))
        n = sum(t.count for t in terms)
    assert (len(terms), n) == unesb.z_counts(3_000)
    assert not (tmp_path / "b").exists()
    unesb.generate(tmp_path / "b", count=300)
    with pytest.raises(pydb.DatabaseNotFoundError):
        pydb.open_index(tmp_path / "b" / "unesb")


def test_gen_unesb_command(tmp_path):
    import subprocess
    import sys
    for extra, indexed in (([], True), (["--no-index"], False)):
        out = tmp_path / ("i" if indexed else "n")
        r = subprocess.run([sys.executable, "-m", "pydb", "gen-unesb", str(out), "--seed", "3",
                            "--count", "2000"]
                           + extra, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(out / "unesb")
        assert (out / "unesb.pdx" / "MANIFEST").exists() == indexed
        with pydb.open(out / "unesb") as db:
            assert len(db) == 2000
