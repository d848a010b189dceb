"""An independent reader reads what pydb writes: the Perl module
Biblio::Isis (Debian package libbiblio-isis-perl, docs/isis-formats.md [BI])
reads a packed ISIS database that pydb created, updated and deleted in,
and finds identical records.

Biblio::Isis reads the packed ISIS layout with MSTXL 0 only (18-byte
leader, `unpack("vVvvvv")`), drops zero-length fields and groups values by
tag (occurrence order kept), so the comparison is made in that shape.
Skipped when perl or the module is missing (.ci/run installs it when it
can).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

import pydb

from conftest import all_master_files

PERL = shutil.which("perl")


def _have_biblio_isis() -> bool:
    if not PERL:
        return False
    return subprocess.run([PERL, "-MBiblio::Isis", "-e", "1"], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not _have_biblio_isis(),
                                reason="perl module Biblio::Isis not installed "
                                       "(apt-get install libbiblio-isis-perl)")

# For every MFN 1..count: "MFN <mfn> <deleted 0/1>" then "<tag> <hex value>"
# per value, tags in ascending order, occurrences in stored order.
DUMP = r'''
use strict; use warnings; use Biblio::Isis;
my $isis = Biblio::Isis->new(isisdb => $ARGV[0], include_deleted => 1)
    or die "cannot open $ARGV[0]";
binmode STDOUT;
for my $mfn (1 .. $isis->count) {
    $isis->{deleted} = 0;
    my $rec = $isis->fetch($mfn);
    my $del = ($isis->{deleted} && $isis->{deleted} == $mfn) ? 1 : 0;
    print "MFN $mfn $del\n";
    next unless $rec;
    for my $tag (sort { $a <=> $b } keys %$rec) {
        print "$tag ", unpack("H*", $_), "\n" for @{ $rec->{$tag} };
    }
}
'''


def perl_dump(base) -> list[str]:
    p = subprocess.run([PERL, "-e", DUMP, str(base)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    assert b"Error" not in p.stderr and b"not even" not in p.stderr, p.stderr
    return p.stdout.decode("ascii").splitlines()


def pydb_dump(base) -> list[str]:
    out = []
    with pydb.open(base) as db:
        for mfn in range(1, db.max_mfn + 1):
            r = db[mfn]
            out.append(f"MFN {mfn} {int(r.deleted)}")
            for tag in sorted({f.tag for f in r.fields}):
                out += [f"{tag} {v.hex()}" for v in r.raw(tag) if v]
    return out


def test_biblio_isis_reads_what_pydb_wrote(tmp_path):
    base = tmp_path / "books"
    with pydb.create(base, "isis-packed") as db:
        with db.transaction() as tx:
            for i in range(1, 301):
                tx.append([(24, f"Title number {i} ".encode() * (i % 9 + 1)),
                           (70, b"Smith, J."), (70, "Andr\u00e9, \u00c9.".encode("cp850")),
                           (26, b"^aParis^bUnesco^c%d" % (1900 + i)),
                           (900, b""),                    # zero-length: skipped by BI
                           (1000 + i % 5, bytes(range(1, 256)))])
        db.update(5, [(24, b"Updated title"), (90, b"x" * 3000)])
        db.update(5, [(24, b"Updated twice")])
        db.delete(7)
        db.delete(8)
        db.undelete(8)
        db.append([(1, b"last")])
    ours = pydb_dump(base)
    theirs = perl_dump(base)
    assert len(theirs) > 301 * 5
    assert theirs == ours
    assert "MFN 7 1" in theirs and "MFN 8 0" in theirs
    assert theirs[theirs.index("MFN 5 0") + 1] == "24 " + b"Updated twice".hex()


REAL_PACKED = []
for _p in all_master_files():
    try:
        with pydb.open(_p) as _db:
            if _db.layout == "isis-packed" and _db.info()["mstxl"] == 0 and _db.max_mfn:
                _db.read_many(_db.mfns(deleted=True))   # sound samples only
                REAL_PACKED.append(_p)
    except pydb.Error:
        pass


@pytest.mark.parametrize("mst", REAL_PACKED[:6], ids=[p.name for p in REAL_PACKED[:6]])
def test_biblio_isis_reads_real_database_after_pydb_update(tmp_path, mst):
    """A real WinISIS-style database, copied and changed by pydb, still
    reads identically in Biblio::Isis and pydb."""
    xrf = [p for p in mst.parent.iterdir() if p.stem == mst.stem and p.suffix.lower() == ".xrf"][0]
    shutil.copy2(mst, tmp_path / mst.name)
    shutil.copy2(xrf, tmp_path / xrf.name)
    base = tmp_path / mst.stem
    with pydb.open(base, readonly=False, sync=False, encoding="utf-8") as db:  # as read
        first = db.mfns()[0]
        db.update(first, list(db[first].fields) + [(999, b"pydb")])
        db.delete(db.mfns()[-1])
        db.append([(1, b"appended by pydb")])
    assert perl_dump(base) == pydb_dump(base)
