"""JSON Lines: pydb's lossless text form of records.

One JSON object per line and record (docs/design.md §8)::

    {"mfn": 1, "deleted": false, "fields": [[24, "Title"], [70, "Smith, J."]]}

``mfn`` is the record's MFN (1-based; may be absent on import),
``deleted`` whether it is logically deleted, ``fields`` the ``[tag,
value]`` pairs in stored order.  A value is a JSON string holding the
field's bytes decoded with the file's encoding (default UTF-8); a value
whose bytes are not valid in that encoding is written as ``{"base64":
"..."}`` with the exact bytes instead, so the form is lossless for any
content.

This module is the format only (:func:`encode_line`, :func:`read_jsonl`);
:func:`pydb.export_jsonl` and :func:`pydb.import_jsonl`
(:mod:`pydb.exchange`) move records between it and a database.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import IsoRecordError
from .iso2709 import IsoRecord, check_on_error
from .paths import Source, opened, source_name

__all__ = ["encode_line", "read_jsonl"]


def _json_value(raw: bytes, encoding: str) -> str | dict[str, str]:
    """`raw` decoded with `encoding`, or ``{"base64": ...}`` when it is
    not valid in that encoding."""
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}


def encode_line(mfn: int | None, deleted: bool, fields: Iterable[tuple[int, bytes]],
                encoding: str = "utf-8") -> bytes:
    """One record as a JSON Lines line (UTF-8 bytes ending in ``\n``):
    ``{"mfn": mfn, "deleted": deleted, "fields": [[tag, value], ...]}``,
    each value decoded with `encoding` or, when its bytes are not valid
    there, ``{"base64": "..."}``.

    Raises LookupError for an unknown `encoding`.
    """
    obj: dict[str, Any] = {"mfn": mfn, "deleted": bool(deleted),
                           "fields": [[tag, _json_value(raw, encoding)]
                                      for tag, raw in fields]}
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def read_jsonl(source: Source, *, encoding: str = "utf-8", on_error: str = "skip",
               errors: list[IsoRecordError] | None = None) -> Iterator[IsoRecord]:
    """Read a JSON Lines file written by :func:`pydb.export_jsonl`.

    Args:
        source: a path (str, bytes, os.PathLike) or a binary file object.
        encoding: codec that turns JSON strings back into field bytes.
        on_error: ``"stop"`` raises at the first bad line; ``"skip"``
            (default) leaves it out and appends its error to `errors`.
        errors: a list you pass to collect the errors of skipped lines
            (None: they are dropped).

    Yields:
        :class:`~pydb.iso2709.IsoRecord` objects (``number`` = 1-based line
        number, ``offset`` = byte offset of the line, ``mfn`` (1-based, or
        None) and ``deleted`` from the object, ``leader`` empty, fields as
        ``(tag, bytes)``).  Blank lines are skipped.  A line that is not
        such an object (``deleted`` other than true, false or null; JSON
        nested too deeply for the parser) is an
        :class:`~pydb.IsoRecordError`.

    Raises:
        IsoRecordError: with ``on_error="stop"``.
        ValueError: `on_error` is neither ``"skip"`` nor ``"stop"``.
        OSError: the file cannot be read.
    """
    check_on_error(on_error)
    name = source_name(source)
    with opened(source, "rb") as f:
        offset = 0
        for number, line in enumerate(f, 1):
            here, offset = offset, offset + len(line)
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict) or not isinstance(obj.get("fields"), list):
                    raise ValueError("not an object with a list of fields")
                mfn = obj.get("mfn")
                if mfn is not None and (not isinstance(mfn, int) or isinstance(mfn, bool)
                                        or not 0 < mfn < 2**31):
                    raise ValueError(f"mfn {mfn!r} is not 1..2147483647")
                fields = []
                for item in obj["fields"]:
                    if not (isinstance(item, list) and len(item) == 2
                            and isinstance(item[0], int) and not isinstance(item[0], bool)):
                        raise ValueError(f"field {item!r} is not [tag, value]")
                    tag, value = item
                    if isinstance(value, str):
                        value = value.encode(encoding)
                    elif isinstance(value, dict) and isinstance(value.get("base64"), str):
                        value = base64.b64decode(value["base64"], validate=True)
                    else:
                        raise ValueError(f"field {tag}: value {value!r} is neither a "
                                         "string nor {\"base64\": ...}")
                    fields.append((tag, value))
                deleted = obj.get("deleted")
                if deleted is not None and not isinstance(deleted, bool):
                    raise ValueError(f"deleted {deleted!r} is not true, false or null")
                rec = IsoRecord(number, here, b"", fields, mfn, bool(deleted))
            except (ValueError, UnicodeError, TypeError, RecursionError) as e:
                why = ("JSON nested too deeply to be a record"
                       if isinstance(e, RecursionError) else e)
                err = IsoRecordError(name, number, here, f"line {number}: {why}")
                if on_error == "stop":
                    raise err from None
                if errors is not None:
                    errors.append(err)
                continue
            yield rec
