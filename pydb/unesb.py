"""A deterministic synthetic bibliographic database, shaped like UNESCO's
"unesb" catalogue that OpenIsis's crashtest ran on (docs/experiments.md §1):
58,880 records x `scale`, with titles, personal and corporate authors,
subjects from a controlled vocabulary with a long-tailed (Zipf)
distribution, languages, years, pages, notes, repeated fields and
subfields, and geographic descriptors (tag 76) that the FST written beside
the database (``unesb.fst``, docs/isis-formats.md §5) indexes under the prefix
``Z``: exactly 4,205 postings of 409 terms at scale 1 (the original's
figures, docs/experiments.md §1), 4,205 x scale postings of round(409 x
sqrt(scale)) terms in general.  No other FST line yields a key that
starts with Z (no generated word begins with a z syllable), so the
native index's ``Z`` range holds exactly those keys.  It is the
crashtest's default database, built with its native index (pydb.native)
on first use into a cache directory and rebuilt when GENERATOR_VERSION
changes.

Fields (CDS conventions): 24 title (sometimes with a ``<The>`` filing
article), 70 personal authors (repeated), 71 corporate author, 26 imprint
(``^a`` place ``^b`` publisher ``^c`` year), 30 collation (``^a`` pages
``^b`` illustrations), 40 language, 44 series, 50 notes, 69 subjects from a
controlled vocabulary of 1,200 descriptors drawn with Zipf weights (each in
``<...>``), 76 geographic descriptors (``<...>``, in about 5% of records).

The same (scale, seed) always gives byte-identical files.
"""

from __future__ import annotations

import math
import os
import random
import shutil
from pathlib import Path

from . import _pydb
from .errors import Error
from .native import build_index

__all__ = ["GENERATOR_VERSION", "RECORDS_PER_SCALE", "FST", "Z_TERMS", "Z_POSTINGS",
           "z_counts", "generate", "default_database"]

#: Version 3: no word starts with a z syllable (titles, authors and
#: subjects gave keys in the Z range); the default database carries its
#: native index.
GENERATOR_VERSION = 3
RECORDS_PER_SCALE = 58_880
#: The original unesb's Z prefix at scale 1 (docs/experiments.md §1).
Z_TERMS, Z_POSTINGS = 409, 4205

#: The FST written beside the database as <name>.fst (docs/isis-formats.md §5:
#: ``ID IT FORMAT``).  Line 76 gives the crashtest's ``Z`` keys: technique
#: 6 = technique 2 (each ``<...>`` term) with the prefix between the
#: delimiters of the leading literal ``'/Z/'``.  Techniques 2/6 run in
#: the default proof mode, which keeps the ``<...>`` that heading mode
#: (``mhu``) would remove.
FST = """24 4 mhu,v24
70 0 mhu,(v70/)
71 0 mhu,(v71/)
69 2 v69
76 6 '/Z/'v76
40 0 'LA=',v40
26 0 'YR=',v26^c
"""

_SYLLABLES = ("ba be bi bo bu ca ce ci co cu da de di do du fa fe fi fo ga ge gi go "
              "la le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri "
              "ro ru sa se si so su ta te ti to tu va ve vi vo za ze zi zo tion ment "
              "al ic ous ing er est an en on ar or").split()
#: A word's first syllable: none starts with z, so that only the FST's
#: '/Z/' line makes keys beginning with Z.
_FIRST = tuple(x for x in _SYLLABLES if not x.startswith("z"))
_LANGS = ["en", "fr", "es", "ru", "ar", "zh", "de", "pt"]
_LANG_WEIGHTS = [40, 20, 15, 8, 5, 5, 4, 3]
_PLACES = ["Paris", "London", "New York", "Geneva", "Nairobi", "Bangkok", "Santiago",
           "Dakar", "Montevideo", "New Delhi", "Moscow", "Cairo", "Rome", "Beirut"]


def _word(rng: random.Random) -> str:
    n = rng.randint(2, 4)
    return rng.choice(_FIRST) + "".join(rng.choice(_SYLLABLES) for _ in range(n - 1))


def z_counts(n: int) -> tuple[int, int]:
    """(terms, postings) of the ``Z`` prefix for a database of `n` records:
    (409, 4205) for 58,880, postings proportional to `n`, terms growing
    with its square root (Heaps' law)."""
    ratio = n / 58_880                    # the original's size, whatever the scale unit
    postings = max(1, round(Z_POSTINGS * ratio))
    terms = max(1, min(postings, round(Z_TERMS * math.sqrt(ratio))))
    return terms, postings


def _z_descriptors(n: int, seed: int) -> dict[int, list[str]]:
    """{mfn: [geographic descriptor, ...]} for the records that have a
    tag 76: exactly z_counts(n) (terms, postings), every (record, term)
    pair distinct, every term used, the rest drawn with Zipf weights."""
    rng = random.Random(seed + 2)
    n_terms, n_postings = z_counts(n)
    names: set[str] = set()
    while len(names) < n_terms:
        w = " ".join(_word(rng) for _ in range(rng.choice((1, 1, 2))))
        if len(w) <= 24:                  # 'Z' + key fits the 30-byte key limit
            names.add(w.capitalize())
    vocab = sorted(names)
    rng.shuffle(vocab)
    weights = [1.0 / (k + 1) for k in range(n_terms)]
    sizes, total = [], 0                  # descriptors per record: 1-3
    while total < n_postings:
        sizes.append(min(rng.choices((1, 2, 3), (60, 30, 10))[0], n_postings - total))
        total += sizes[-1]
    if len(sizes) > n:
        raise ValueError(f"{n} records cannot hold {n_postings} Z postings")
    mfns = sorted(rng.sample(range(1, n + 1), len(sizes)))
    cover = iter(vocab)                   # the first n_terms slots use each term once
    out = {}
    for mfn, k in zip(mfns, sizes, strict=True):
        terms: list[str] = []
        while len(terms) < k:
            t = next(cover, None) or rng.choices(vocab, weights)[0]
            if t not in terms:
                terms.append(t)
        out[mfn] = terms
    return out


def _records(n: int, seed: int):
    zdesc = _z_descriptors(n, seed)
    rng = random.Random(seed)
    vocab_rng = random.Random(seed + 1)
    subjects = sorted({_word(vocab_rng).capitalize()
                       + (" " + _word(vocab_rng) if i % 3 == 0 else "")
                       for i in range(1200)})
    # Zipf-like weights: subject k has weight 1/(k+1)
    subj_weights = [1.0 / (k + 1) for k in range(len(subjects))]
    surnames = [_word(vocab_rng).capitalize() for _ in range(5000)]
    corporate = [f"{rng.choice(['Institute', 'Council', 'Office', 'Centre'])} of "
                 f"{_word(vocab_rng).capitalize()} {_word(vocab_rng)}" for _ in range(300)]
    publishers = ["Unesco", "FAO", "WHO", "ILO", "UNDP", "IAEA"] + corporate[:20]
    for mfn in range(1, n + 1):
        f = []
        title_words = [_word(rng) for _ in range(rng.randint(3, 12))]
        title = " ".join(title_words).capitalize()
        if rng.random() < 0.2:
            title = "<The> " + title
        f.append((24, title))
        for _ in range(rng.choices([0, 1, 2, 3, 4], [10, 45, 25, 15, 5])[0]):
            f.append((70, f"{rng.choice(surnames)}, {rng.choice('ABCDEFGHJKLMNPRSTW')}."))
        if rng.random() < 0.3:
            f.append((71, rng.choice(corporate)))
        year = rng.randint(1946, 2005)
        f.append((26, f"^a{rng.choice(_PLACES)}^b{rng.choice(publishers)}^c{year}"))
        f.append((30, f"^a{rng.randint(1, 900)} p.^b"
                  + rng.choice(["illus.", "tables", "maps", "graphs"])))
        f.append((40, rng.choices(_LANGS, _LANG_WEIGHTS)[0]))
        subj = rng.choices(subjects, subj_weights, k=rng.randint(1, 5))
        f.append((69, "".join(f"<{s}>" for s in dict.fromkeys(subj))))
        if rng.random() < 0.35:
            f.append((50, "Incl. bibl." if rng.random() < 0.6
                      else " ".join(_word(rng) for _ in range(rng.randint(4, 20)))))
        if mfn in zdesc:
            f.append((76, "".join(f"<{t}>" for t in zdesc[mfn])))
        if rng.random() < 0.15:
            f.append((44, " ".join(_word(rng) for _ in range(rng.randint(2, 6))).capitalize()))
        yield [(tag, value.encode("ascii")) for tag, value in f]


def generate(directory, scale: int = 1, seed: int = 1, layout: str = "isis-packed",
             name: str = "unesb", count: int | None = None, index: bool = False,
             progress=False) -> Path:
    """Write the synthetic database `directory`/`name`.mst/.xrf and its
    FST `directory`/`name`.fst (:data:`FST`), and with `index` its native
    inverted index `directory`/`name`.pdx built from that FST
    (:func:`pydb.build_index`, 8-bit keys, no length limit).

    Args:
        directory: folder to create it in (created if missing).
        scale: size factor: 58,880 x scale records (int >= 1).
        seed: random seed (int); equal (scale, seed) give identical files.
        layout: leader layout (docs/isis-formats.md §2.2).
        name: base name of the files.
        count: number of records, overriding 58,880 x scale (for tests).
        index: also build the native index (about 1 s per 58,880 records).
        progress: passed to :func:`pydb.build_index` (True: a tqdm bar).

    Returns:
        The base path of the new database (Path, without extension).

    Raises:
        FileExistsError (as pydb.DiskError): the files exist already.
        ValueError: scale < 1, an unknown layout, or `count` too small
            to hold the Z postings (fewer records than postings / 3).
    """
    if scale < 1:
        raise ValueError("scale must be >= 1")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    base = directory / name
    n = RECORDS_PER_SCALE * scale if count is None else count
    _pydb._build(os.fspath(base), layout, 0, _records(n, seed), True)
    base.with_suffix(".fst").write_text(FST, encoding="ascii")
    if index:
        build_index(base, progress=progress)
    return base


def default_cache_dir() -> Path:
    """Where the default database lives: $PYDB_CACHE_DIR, else
    $XDG_CACHE_HOME/pydb, else ~/.cache/pydb."""
    env = os.environ.get("PYDB_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "pydb" if xdg else Path.home() / ".cache" / "pydb"


def _index_readable(base: Path) -> bool:
    """True if the native index of `base` opens (format and manifest)."""
    try:
        _pydb._open_native_index(os.fspath(base)).close()
    except Error:
        return False
    return True


def default_database(scale: int = 1, cache_dir=None) -> Path:
    """The crashtest's default database with its FST and native index
    (:func:`generate` with ``index=True``), built on first use (a few
    seconds) in ``<cache>/unesb-v<GENERATOR_VERSION>-x<scale>`` and reused
    afterwards; a new GENERATOR_VERSION builds a new folder (older ones are
    left for the user to delete).  A folder whose index this pydb cannot
    read (built by a pydb with an older index format) is built again, so
    that the crashtest never silently loses its index phase.  `cache_dir`
    overrides :func:`default_cache_dir`.

    Returns its base path (Path)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = cache / f"unesb-v{GENERATOR_VERSION}-x{scale}"
    base = folder / "unesb"
    if (folder / "complete").exists():
        if _index_readable(base):
            return base
        stale = folder.with_name(folder.name + f".stale{os.getpid()}")
        try:
            os.rename(folder, stale)   # readers that have it open keep it
        except OSError:                # another process moved it first
            pass
        shutil.rmtree(stale, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    generate(tmp, scale=scale, index=True)
    (tmp / "complete").write_text(f"generator {GENERATOR_VERSION}\n")
    try:
        os.rename(tmp, folder)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return base
