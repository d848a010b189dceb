"""A new cross-reference file (XRF) for a master file whose XRF is lost or
damaged, from a sequential scan of its record versions.

The method is CISIS ``mkxrf``'s (BIREME, ``mkxrf.c``): the core
(csrc/mkxrf.c) walks the master file from the control record to the end
of records it names (NXTMFB/NXTMFP), takes each version whose leader and
directory are plausible, and gives each MFN its last version in file
order; ``STATUS 1`` makes the pointer negative (logically deleted), a
version with a back pointer gets the "update pending" flag (CDS/ISIS
clears the back pointer when it inverts a record), and an MFN below
NXTMFN with no version is physically deleted.  Formats:
docs/isis-formats.md §2 (master file) and §3 (XRF).

The master file is only read (but for ``mend_control``); the old XRF is
copied to ``<xrf>.bak``, then written over with the new one.  The database is had to itself
meanwhile: the pydb writer lock and a lock on the XRF are held, and a
file lease (Linux) refuses while any process has the XRF open (a pydb
handle, WinISIS) and makes opens of it wait until the new XRF is in.
Where no lease or writer lock can be had (another owner's files, NFS) it
refuses unless told ``force=True``.  A version written
past the end of records the control record names (an append that was
never committed, or a writer such as pyisis that left the control record
behind) is not taken, as CISIS ``mkxrf`` takes none; the report counts
them.  The "new" flag (never inverted) cannot be known and is not set:
an ISIS inverted file is brought up to date by a full inversion (WinISIS
"Invert", CISIS ``ifload``), not an update.

A master file cut short (a copy broken off, a full disk) keeps a control
record whose end of records lies past the file's end, and pydb refuses
to open it; ``mend_control=True`` then also sets that end to the end of
the last whole version found, as CISIS ``ctlmfn`` mends it.  The records
after the cut are lost either way.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from . import _pydb
from .errors import DatabaseExistsError, DatabaseNotFoundError
from .paths import PathArg, base_name, find_sidecar

__all__ = ["rebuild_xrf"]


def rebuild_xrf(path: PathArg, *, layout: str | None = None,
                replace: bool = False, force: bool = False,
                mend_control: bool = False) -> dict[str, Any]:
    """Write the XRF of the database at `path` anew from its master file.

    Args:
        path: base name of the database, or its ``.mst`` file (any letter
            case of the extension).
        layout: the record leader layout, one of :data:`pydb.LAYOUTS`;
            None (the default) takes the one under which the first 4 MiB
            of the master file hold the most bytes of record versions.
        replace: where an XRF exists, copy it to ``<xrf>.bak`` and write
            the new one over it; False refuses.
        force: go on where no file lease or writer lock can be had
            (another owner's files, a network file system): the caller
            vouches that no program has the database open.
        mend_control: where the master file is shorter than the end of
            records its control record names, write into the control
            record (NXTMFB/NXTMFP) the end of the last whole version
            found, rounded up to 2^MSTXL bytes (the file grown by zeros to
            it), after the new XRF; nothing else of the master file
            changes.  Where the old XRF points at versions after that
            end (NXTMFB/NXTMFP damaged to an earlier block), those
            versions are taken and the end is set after the last of them;
            versions no old entry names stay out.  The old end stays in
            the report (``ctl_end``).

    Returns:
        A dict: ``xrf`` (the path written), ``backup`` (the old XRF's new
        path, or None), ``layout``, ``mstxl``, ``next_mfn`` (the control
        record's NXTMFN: the XRF has entries for MFN 1..next_mfn-1),
        ``ctl_end`` (bytes: the end of records the control record
        names), ``end`` (bytes scanned up to: ctl_end, or the file's size
        where the file is shorter; the file's size where `mend_control`
        took versions after ctl_end), ``past_end`` (versions found after
        ctl_end, not taken), ``past_end_taken`` (with `mend_control`: those
        after ctl_end the old XRF pointed at, taken), ``versions`` and
        ``version_bytes`` (record versions taken, every version of an
        MFN counted),
        ``active`` and ``deleted`` (MFNs whose entry names a version of
        STATUS 0 / 1), ``pending`` (of them, flagged "update pending"),
        ``missing`` (MFNs with no version: physically deleted),
        ``mended_end`` (bytes: the end of records `mend_control` wrote,
        or 0 where the control record was left as it was).

    Raises:
        DatabaseNotFoundError: no master file at `path`.
        DatabaseExistsError: an XRF exists and `replace` is False, or
            ``<xrf>.bak`` exists already (move it away first).
        LockTimeoutError: a pydb writer holds the writer lock, another
            rebuild_xrf is at work, or this or another process has the XRF
            open: close the database first.
        UnsupportedError: ``<base>.wal`` holds commits (a pydb handle has
            the database open, or one died before its recovery ran: open
            the database once, close it, then try again); or no file lease
            or writer lock can be had and `force` is False.
        CorruptionError: the control record is unusable (NXTMFN,
            NXTMFB/NXTMFP or MSTXL out of range for the file); or, with
            `mend_control`, the scan found no whole record version before
            the cut (another `layout`?): nothing is written.
        ValueError: an unknown `layout`, or a master file that is not a
            regular file.
        DiskError: a read or write failed: before the old XRF was copied
            it is as it was; after, ``<xrf>.bak`` holds it (run again).
    """
    base = base_name(path)

    def beside(ext: str) -> str | None:    # the file as `path` spells its folder
        found = find_sidecar(base, ext)
        return found and os.path.join(os.path.dirname(base), os.path.basename(found))

    mst = beside("mst")
    if mst is None:
        raise DatabaseNotFoundError(errno.ENOENT, "no master file", base + ".mst")
    old = beside("xrf")
    if old is not None and not replace:
        raise DatabaseExistsError(errno.EEXIST, "the database has an XRF: replace=True "
                                  "(pydb mkxrf --replace) keeps it as .bak and writes a "
                                  "new one", old)
    backup = old + ".bak" if old is not None else None
    if backup is not None and os.path.lexists(backup):
        raise DatabaseExistsError(errno.EEXIST, "a backup of an earlier XRF is in the way: "
                                  "move it away first", backup)
    target = old or os.path.splitext(mst)[0] + (".XRF" if mst.endswith(".MST") else ".xrf")
    report = _pydb._mkxrf(mst, target, backup, layout, force, mend_control)
    return {"xrf": target, "backup": backup, **report}
