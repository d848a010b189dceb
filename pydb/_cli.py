"""What the command line's parsers share: the exit-status table that ends
``pydb --help``, ``pydb COMMAND --help`` and the tools' own help
(crashtest, ministat, gctest)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable


def exit_table(statuses: Iterable[tuple[int, str]]) -> str:
    """The help text of `statuses` ((status, meaning) pairs): ``exit
    status:`` and one entry per status, wrapped to 79 columns."""
    return "exit status:\n" + "".join(
        textwrap.fill(what, 79, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        + "\n" for code, what in statuses)
