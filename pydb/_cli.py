"""What the command line's parsers share: the exit-status table that ends
``pydb --help``, ``pydb COMMAND --help`` and the tools' own help
(crashtest, ministat, gctest), and the tools' parser."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterable


def tool_parser(prog: str, description: str,
                statuses: Iterable[tuple[int, str]]) -> argparse.ArgumentParser:
    """The argument parser of a tool that parses its own arguments
    (``pydb crashtest``, ``ministat``, ``gctest``): `description` refilled
    to 79 columns, its exit statuses (:func:`exit_table`) as the epilog."""
    return argparse.ArgumentParser(
        prog=prog, description=textwrap.fill(" ".join(description.split()), 79),
        epilog=exit_table(statuses), formatter_class=argparse.RawDescriptionHelpFormatter)


def exit_table(statuses: Iterable[tuple[int, str]]) -> str:
    """The help text of `statuses` ((status, meaning) pairs): ``exit
    status:`` and one entry per status, wrapped to 79 columns."""
    return "exit status:\n" + "".join(
        textwrap.fill(what, 79, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
        + "\n" for code, what in statuses)
