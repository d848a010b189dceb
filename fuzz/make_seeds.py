"""Build the seed corpora of the fuzz targets (docs/fuzzing.md) at run time.

    python fuzz/make_seeds.py [--data DIR] [--out DIR] [--max-size BYTES]

Writes OUT/<target>/<sha1 of the input> for each target of fuzz/Makefile:

- from the real CDS/ISIS and ISO 2709 files under DIR (default:
  $PYDB_TEST_DATA, else ../shared/data/isis beside the repository; skipped
  when absent): master file + XRF pairs, ISIS inverted-file sets (classic
  and LIND), ISO 2709 and MARC files, FST files, ISISUC/ISISAC tables and
  stop-word files, and the native index pydb builds for each real
  database that has an FST beside it.  Nothing is copied into the repository: the seeds live
  under OUT (default fuzz/build/seeds, ignored by git);
- from databases pydb itself creates here (every leader layout, MSTXL 0
  and 3, updates and deletions, its commit header), their ISO 2709 and
  JSON Lines exports, native indexes written by commits (several
  segments, tombstones), commit headers after commits and with readers
  registered, ISIS inverted files (classic and LIND) written here from
  the keys and postings of pydb's native indexes (isis_inverted; pydb
  itself never writes them), and hand-written search expressions and
  FST rules.  So every target gets seeds without the real files too.

A native index seed (target nidx) is its MANIFEST followed by the segment
files it names, in its order (fuzz/fuzz_nidx.c); a commit header seed
(target shm) is the .shm alone (fuzz/fuzz_shm.c); a log seed (target
wal) is a .wal alone, written by sync=True commits (which keep their
frames until a checkpoint) on the database fuzz/fuzz_wal.c lays out.

OUT/jsonl is for the atheris target of fuzz/atheris_targets.py.

Inputs that stand for several files join them with FUZZ_SEP (fuzz/fuzz.h),
an empty part standing for a missing file.  Inputs over --max-size bytes
(default 1 MiB) are left out.  Prints how many seeds each target got.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEP = b"#PYDB-FUZZ-FILE#"          # FUZZ_SEP of fuzz/fuzz.h
TARGETS = ("search", "fst", "iso2709", "mst", "isis_index", "keys", "nidx", "shm", "wal")
PY_TARGETS = ("jsonl",)   # fuzz/atheris_targets.py (its iso2709 uses the C target's seeds)
ISIS_INDEX_EXTS = ("cnt", "n01", "n02", "l01", "l02", "ifp", "ly1", "ly2", "iyp")

SEARCH = [
    "WATER", "water", "WATER + SOIL", "WATER * SOIL", "WATER ^ SOIL",
    "WATER AND SOIL", "WATER OR SOIL", "WATER AND NOT SOIL", "WATER WITH SOIL",
    "WATER (G) SOIL", "WATER (F) SOIL", "WATER (g) SOIL", "WATER . SOIL",
    "WATER .. SOIL", "WATER $ SOIL", "WATER $$ SOIL", "WATER . . SOIL",
    "WAT$", "A$", "\"WATER\"$", "WATER/(24)", "WATER /(24, 70)", "SOIL$/(69)",
    "(WATER + SOIL) * (A + AB)", "((WATER))", "\"WATER SOIL\"", "\"#1\"", "#1",
    "NOT", "(", ")", "WATER +", "* SOIL", "WATER/(", "WATER/(0)", "WATER/(65536)",
    "\u00c9TUDE", "\u00e9tude$", "1990 * A (G) AB . ABC",
    "(" * 100 + "A" + ")" * 100, "(" * 101 + "A" + ")" * 101,
]

FST = [
    "24 0 V24\n", "24 4 V24\n70 0 (V70/)\n", "69 2 V69\n26 8 V26^c\n",
    "24 1 V24^a\n24 3 V24\n24 5 'TI_'V24\n24 6 V24\n24 7 V24\n",
    "70 0 MHU,(V70/)\n24 4 MHU,V24\n69 2 V69\n",
    "1 0 if p(v26) then v26^a fi\n2 0 (if iocc=1 then v70 else '; 'v70 fi)\n",
    "3 0 mfn\n4 0 v24.10\n5 0 v24*3.5\n6 0 (|<|v70|>|)\n7 0 s(v24,v70)\n",
    "8 0 mpl,v24\n9 0 mdl,v70\n10 4 v44\n1024 1000 v24\n",
    "", "24 0\n", "24 9 V24\n", "x 0 v24\n", "24 0 (((((v24)))))\n",
]

RECORD = (b"24 <The> world of <water>: a survey^bfirst edition\n"
          b"26 ^aParis^bUnesco^c1990\n69 Water resources; Hydrology; Soil\n"
          b"70 Smith, J.\n70 Doe, A.B.\n44 \xc3\x89tudes\n")

STW = [b"THE\nOF\nA\nAN\n", b"the\r\nof\r\n", b"\xc3\xa9t\xc3\xa9\nDE\n"]


def default_data() -> Path:
    env = os.environ.get("PYDB_TEST_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data" / "isis"


def files_by_ext(data: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    if not data.is_dir():
        return out
    for p in sorted(data.rglob("*")):
        if p.is_file():
            out.setdefault(p.suffix.lower().lstrip("."), []).append(p)
    return out


def sibling(p: Path, ext: str) -> Path | None:
    """The file beside p with extension ext, in any case, or None."""
    for cand in (p.with_suffix("." + ext), p.with_suffix("." + ext.upper())):
        if cand.is_file():
            return cand
    for cand in p.parent.glob(p.stem + ".*"):
        if cand.suffix.lower() == "." + ext and cand.is_file():
            return cand
    return None


def joined(*parts: bytes) -> bytes:
    """Parts joined by the separator, trailing missing files dropped."""
    ps = list(parts)
    while len(ps) > 1 and not ps[-1]:
        ps.pop()
    return SEP.join(ps)


def read(p: Path | None) -> bytes:
    return p.read_bytes() if p is not None else b""


def native_index(base: Path) -> bytes:
    """The native index of the database base as a fuzz_nidx input: its
    MANIFEST, then the segments the MANIFEST names, in its order."""
    pdx = base.with_suffix(".pdx")
    manifest = (pdx / "MANIFEST").read_bytes()
    segs = [line.split(b" ", 1)[1].decode() for line in manifest.split(b"\n")
            if line.startswith(b"segment seg-")]
    return joined(manifest, *((pdx / s).read_bytes() for s in segs))


def real_native_seeds(by_ext: dict[str, list[Path]], tmp: Path,
                      max_mst: int = 4 << 20) -> Iterator[tuple[str, bytes]]:
    """The native index pydb builds for each real database with an FST of
    its own name beside it (a copy of the database in tmp; databases whose
    build fails or with a master file over max_mst bytes are left out)."""
    sys.path.insert(0, str(REPO))
    import pydb

    for i, fst in enumerate(by_ext.get("fst", [])):
        mst, xrf = sibling(fst, "mst"), sibling(fst, "xrf")
        if mst is None or xrf is None or mst.stat().st_size > max_mst:
            continue
        d = tmp / f"real{i}"
        d.mkdir()
        for src, ext in ((mst, "mst"), (xrf, "xrf"), (fst, "fst"),
                         (sibling(fst, "stw"), "stw")):
            if src is not None:
                shutil.copyfile(src, d / f"db.{ext}")
        try:
            pydb.build_index(d / "db", progress=False, max_key=30)
        except (pydb.Error, UnicodeError, ValueError):
            continue
        yield "nidx", native_index(d / "db")


def real_seeds(data: Path) -> Iterator[tuple[str, bytes]]:
    by_ext = files_by_ext(data)
    with tempfile.TemporaryDirectory(prefix="pydb-seeds-") as tmp:
        yield from real_native_seeds(by_ext, Path(tmp))
    for mst in by_ext.get("mst", []):
        xrf = sibling(mst, "xrf")
        if xrf is not None:
            yield "mst", joined(mst.read_bytes(), xrf.read_bytes())
    for cnt in by_ext.get("cnt", []):
        parts = [read(sibling(cnt, e)) for e in ISIS_INDEX_EXTS]
        yield "isis_index", joined(*parts)
    for n01 in by_ext.get("n01", []):   # sets without a .cnt: refused, but read
        if sibling(n01, "cnt") is None:
            yield "isis_index", joined(*(read(sibling(n01, e)) for e in ISIS_INDEX_EXTS))
    for ext in ("iso", "mrc"):
        for p in by_ext.get(ext, []):
            yield "iso2709", p.read_bytes()
    for p in by_ext.get("json", []):   # isis2json output: not pydb's lines
        yield "jsonl", p.read_bytes()
    for p in by_ext.get("fst", []):
        yield "fst", p.read_bytes()
        yield "fst", joined(p.read_bytes(), RECORD)
    tabs = {p.name.lower(): p for p in by_ext.get("tab", [])}
    uc, ac = tabs.get("isisuc.tab"), tabs.get("isisac.tab")
    for p in by_ext.get("stw", []):
        yield "keys", joined(b"", b"", p.read_bytes())
        yield "keys", joined(read(uc), read(ac), p.read_bytes())
    if uc is not None or ac is not None:
        yield "keys", joined(read(uc), read(ac))


def made_seeds(tmp: Path) -> Iterator[tuple[str, bytes]]:
    """Databases, exports and texts pydb makes itself."""
    sys.path.insert(0, str(REPO))
    import pydb

    for s in SEARCH:
        yield "search", s.encode("utf-8")
    for f in FST:
        yield "fst", f.encode("utf-8")
        yield "fst", joined(f.encode("utf-8"), RECORD)
    for s in STW:
        yield "keys", joined(b"", b"", s)
    upper = b" ".join(b"%03d" % c for c in bytes(range(256)).upper())
    yield "keys", joined(upper, b"", STW[0])
    yield "keys", joined(b"", b" ".join(b"%03d" % c for c in b"ABCxyz0189"), STW[0])
    for layout in pydb.LAYOUTS:
        for mstxl in (0, 3):
            base = tmp / f"{layout}-{mstxl}"
            with pydb.create(base, layout=layout, mstxl=mstxl) as db:
                for i in range(1, 13):
                    db.append([(24, f"Title {i} of the water survey"),
                               (70, "Smith, J."), (70, f"Author {i}"),
                               (26, f"^aParis^bUnesco^c{1980 + i}")])
                db.update(3, [(24, "Changed title"), (69, "Soil")])
                db.update(3, [(24, "Changed again " * 20)])
                db.delete(5)
                db.append([(1, "x" * 3000)])
            mst, xrf = base.with_suffix(".mst"), base.with_suffix(".xrf")
            shm = base.with_suffix(".shm")
            yield "mst", joined(mst.read_bytes(), xrf.read_bytes())
            yield "mst", joined(mst.read_bytes(), xrf.read_bytes(), b"", read(
                shm if shm.is_file() else None))
            if shm.is_file():
                yield "shm", shm.read_bytes()
            for flavour in ("isis", "marc"):
                iso = tmp / f"{layout}-{mstxl}.{flavour}.iso"
                pydb.export_iso(base, iso, flavour)
                yield "iso2709", iso.read_bytes()
            jsonl = tmp / f"{layout}-{mstxl}.jsonl"
            pydb.export_jsonl(base, jsonl, deleted=True)
            yield "jsonl", jsonl.read_bytes()
    with pydb.create(tmp / "empty") as db:
        pass
    yield "mst", joined((tmp / "empty.mst").read_bytes(), (tmp / "empty.xrf").read_bytes())
    yield "shm", (tmp / "empty.shm").read_bytes()
    yield from made_native_seeds(tmp, pydb)
    yield from made_isis_seeds(tmp, pydb)
    yield from made_wal_seeds(tmp, pydb)


def made_wal_seeds(tmp: Path, pydb) -> Iterator[tuple[str, bytes]]:
    """Logs of sync=True commits (appends, updates crossing an XRF block,
    deletions; with and without a native index, whose MANIFEST the frames
    carry as a whole file) on the template of fuzz/fuzz_wal.c: "db", ISIS
    aligned, three records (field 24 and field 70), one commit each.  Taken
    before the writer closes (its close is a checkpoint)."""
    for fst in (None, "24 4 V24\n"):
        d = tmp / ("wal-index" if fst else "wal")
        d.mkdir()
        base = d / "db"
        with pydb.create(base, "isis-aligned", gc="none", fst=fst) as db:
            for i in range(1, 4):
                db.append([(24, f"Record {i} on water"), (70, "Smith, J.")])
        db = pydb.open(base, readonly=False, sync=True, gc="none")
        db.append([(24, "A new record on soil")])
        yield "wal", (d / "db.wal").read_bytes()
        with db.transaction() as tx:
            for i in range(130):
                tx.append([(24, f"Bulk {i}"), (70, "Smith, J.")])
        db.update(2, [(24, "Record 2 changed")])
        db.delete(3)
        yield "wal", (d / "db.wal").read_bytes()
        db.close()


def made_native_seeds(tmp: Path, pydb) -> Iterator[tuple[str, bytes]]:
    """Native indexes written by commits (a segment per commit, inline in
    the MANIFEST while small, tombstones for updated and deleted records;
    gc="none" keeps them unmerged), a bulk-built one with stop words and a
    key limit, then with commits after its build (a segment file and
    inline ones), and the commit headers of those databases, also while
    snapshots are registered."""
    fst = "24 4 V24\n70 0 (V70/)\n26 2 V26^c\n"
    base = tmp / "nx"
    with pydb.create(base, fst=fst, gc="none") as db:
        for i in range(1, 41):
            db.append([(24, f"Title {i} of the water survey"), (70, "Smith, J."),
                       (70, f"Author {i % 7}"), (26, f"^aParis^c{1980 + i}")])
        yield "nidx", native_index(base)
        yield "shm", base.with_suffix(".shm").read_bytes()
        db.update(3, [(24, "Changed title on soil"), (70, "Doe, A.")])
        db.delete(5)
        with db.snapshot():
            db.append([(24, "After the snapshot " + "word " * 40)])
            yield "shm", base.with_suffix(".shm").read_bytes()
        yield "nidx", native_index(base)
    big = tmp / "nxbig"
    with pydb.create(big, fst=fst, stw="THE\nOF\n", max_key=12) as db:
        for i in range(1, 300):
            db.append([(24, f"The survey {i} of water and soil {i * 7919 % 1000}"),
                       (70, f"Author {i % 31}")])
    pydb.build_index(big, progress=False)
    yield "nidx", native_index(big)
    yield "shm", big.with_suffix(".shm").read_bytes()
    with pydb.open(big, readonly=False, gc="none") as db:
        db.update(2, [(24, "Updated survey of the soil"), (70, "Author 3")])
        db.append([(24, "A new survey of water"), (70, "Author 5")])
    yield "nidx", native_index(big)


def index_terms(db) -> list[tuple[bytes, list[tuple[int, int, int, int]]]]:
    """Every key of db's index (UTF-8) with its postings (mfn, tag, occ,
    cnt), in key order: isis_inverted()'s input."""
    return [(t.key.encode("utf-8"), [tuple(p) for p in db.postings(t.key)])
            for t in db.terms()]


def made_isis_seeds(tmp: Path, pydb) -> Iterator[tuple[str, bytes]]:
    """ISIS inverted files (isis_inverted(), classic and LIND) of the keys
    and postings of native indexes pydb builds: three records with a key
    too long for tree 1, three whose tree 2 is empty, and 130 records
    with a key each (trees of two levels, a posting list over many .ifp
    blocks)."""
    fst = "24 4 V24\n70 0 (V70/)\n26 0 V26\n30 0 V30\n"
    sets = [
        [[(24, "Apple pie"), (26, "A publisher name longer than ten")],
         [(24, "Banana split")], [(24, "Cherry"), (70, "Smith, J.")]],
        [[(24, "Water")], [(24, "Soil and water")], [(70, "Doe, A.")]],
        [[(24, "The survey of water"), (30, f"KEY{i:04d}"), (70, f"Author {i % 7}")]
         for i in range(1, 131)],
    ]
    for n, records in enumerate(sets):
        with pydb.create(tmp / f"isis{n}", fst=fst, max_key=30, gc="none") as db:
            for r in records:
                db.append(r)
            terms = index_terms(db)
        yield "isis_index", isis_inverted(terms)
        yield "isis_index", isis_inverted(terms, lind=True)


def isis_inverted(terms: list[tuple[bytes, list[tuple[int, int, int, int]]]],
                  lind: bool = False) -> bytes:
    """An ISIS inverted file of terms (ascending keys of at most 30 bytes,
    classic; 60, LIND; each with its postings (mfn, tag, occ, cnt)) as a
    fuzz_isis_index input: .cnt, .n01, .n02 and the classic .l01, .l02,
    .ifp or the LIND .ly1, .ly2, .iyp, laid out as docs/isis-formats.md
    §4 describes (packed records, little-endian; key lengths 10/30
    classic, 16/60 LIND; leaves and nodes of 10 entries; one posting list
    segment per key; LIND lists of 3-byte MFNs with CNT when INFO3 > 0)."""
    le1, le2 = (16, 60) if lind else (10, 30)
    ifp = bytearray(512)              # classic: block 1, words 0-1 the next free place
    blk, word = 1, 2
    iyp = bytearray()
    trees: dict[int, list[tuple[bytes, bytes]]] = {1: [], 2: []}

    def ifp_word(b: int, w: int) -> int:
        while len(ifp) < b * 512:
            ifp.extend(struct.pack("<i", len(ifp) // 512 + 1) + bytes(508))
        return (b - 1) * 512 + 4 + 4 * w

    for key, posts in terms:
        if lind:   # INFO1 offset, INFO2 count, INFO3 distinct records (CNT kept)
            at = len(iyp)
            for mfn, _tag, _occ, cnt in posts:
                iyp += mfn.to_bytes(3, "big") + cnt.to_bytes(2, "big")
            ref = struct.pack("<iii", at, len(posts), len({p[0] for p in posts}))
        else:      # the header and the first posting in one block
            if word + 7 > 127:
                blk, word = blk + 1, 0
            ref = struct.pack("<ii", blk, word)
            o = ifp_word(blk, word)
            n = len(posts)
            ifp[o:o + 20] = struct.pack("<5i", 0, 0, n, n, n)
            word += 5
            for mfn, tag, occ, cnt in posts:
                if word + 2 > 127:
                    blk, word = blk + 1, 0
                o = ifp_word(blk, word)
                ifp[o:o + 8] = (mfn.to_bytes(3, "big") + tag.to_bytes(2, "big")
                                + bytes([occ]) + cnt.to_bytes(2, "big"))
                word += 2
        trees[1 if len(key) <= le1 else 2].append((key, ref))
    if not lind:
        struct.pack_into("<i", ifp, 0, 1)
        struct.pack_into("<ii", ifp, 4, blk, word)
    files = {"cnt": b"", "n01": b"", "n02": b"", "l01": b"", "l02": b"", "ifp": b"",
             "ly1": b"", "ly2": b"", "iyp": b""}
    for t, le in ((1, le1), (2, le2)):
        entries = trees[t]
        leaves = [entries[i:i + 10] for i in range(0, len(entries), 10)]
        leaf_recs = []
        for i, leaf in enumerate(leaves, 1):
            head = struct.pack("<iHHi", i, len(leaf), t, i + 1 if i < len(leaves) else 0)
            if lind:
                head += struct.pack("<i", i - 1)          # PSB, the previous leaf
            body = b"".join(k.ljust(le, b" ") + ref for k, ref in leaf)
            empty = b" " * le + bytes(12 if lind else 8)
            leaf_recs.append(head + body + empty * (10 - len(leaf)))
        # nodes, level by level up to one root: (lowest key, PUNT)
        level = [(leaf[0][0], -i) for i, leaf in enumerate(leaves, 1)]
        nodes: list[bytes] = []
        liv = -1 if not leaves else 0
        while level:
            groups = [level[i:i + 10] for i in range(0, len(level), 10)]
            up = []
            for g in groups:
                pos = len(nodes) + 1
                nodes.append(struct.pack("<iHH", pos, len(g), t)
                             + b"".join(k.ljust(le, b" ") + struct.pack("<i", pt) for k, pt in g)
                             + (b" " * le + bytes(4)) * (10 - len(g)))
                up.append((g[0][0], pos))
            if len(up) == 1:
                break
            level, liv = up, liv + 1
        files["cnt"] += struct.pack("<HHHHHhiiiH", t, 5, 5, 15, 5, liv,
                                    len(nodes), len(nodes), len(leaf_recs), 0)
        files[f"n0{t}"] = b"".join(nodes)
        files[f"ly{t}" if lind else f"l0{t}"] = b"".join(leaf_recs)
    if lind:
        files["iyp"] = bytes(iyp)
    else:
        files["ifp"] = bytes(ifp)
    return joined(*(files[e] for e in ISIS_INDEX_EXTS))


def write(out: Path, seeds: Iterator[tuple[str, bytes]], max_size: int,
          counts: dict[str, int]) -> None:
    for target, blob in seeds:
        if len(blob) > max_size:
            continue
        d = out / target
        d.mkdir(parents=True, exist_ok=True)
        name = d / hashlib.sha1(blob).hexdigest()
        if not name.exists():
            name.write_bytes(blob)
            counts[target] += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=default_data(),
                    help="the real CDS/ISIS files (default: $PYDB_TEST_DATA "
                         "or ../shared/data/isis)")
    ap.add_argument("--out", type=Path, default=REPO / "fuzz" / "build" / "seeds")
    ap.add_argument("--max-size", type=int, default=1 << 20)
    args = ap.parse_args(argv)
    counts = dict.fromkeys(TARGETS + PY_TARGETS, 0)
    for t in counts:
        (args.out / t).mkdir(parents=True, exist_ok=True)
    if args.data.is_dir():
        write(args.out, real_seeds(args.data), args.max_size, counts)
    else:
        print(f"make_seeds: no real data at {args.data}; generated seeds only")
    with tempfile.TemporaryDirectory(prefix="pydb-seeds-") as tmp:
        write(args.out, made_seeds(Path(tmp)), args.max_size, counts)
    for t in counts:
        print(f"make_seeds: {t}: {counts[t]} new seeds in {args.out / t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
