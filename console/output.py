"""Output for people and for pipes.

On a terminal (or with $COLUMNS set) tables are rich's, fitted to the width.
In a pipe nothing is wrapped or cut: rich tables take their natural width,
and a run's report (`simulate`, `run`, `show`) is plain columns that awk and
grep read a row per line and a cell per field, without importing rich.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

PIPE_WIDTH = 1000  # wide enough that no table or line is folded when the reader is a file or another program


def for_people(stream: TextIO) -> bool:
    """True when `stream` is a terminal, or $COLUMNS asks for a width: output there is laid out for reading."""
    return stream.isatty() or bool(os.environ.get("COLUMNS"))


def output_console(stderr: bool = False) -> Console:
    """A rich Console that fits the terminal, or (piped, with no $COLUMNS) lets tables take their natural
    width and prints prose as unbroken lines, so grep and logs see whole rows."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # highlight=False: what pipedeck prints is styled where it means something, not by rich's guesses at numbers;
    # emoji=False: a label or study name with ":fire:" in it is printed as written
    if for_people(stream):
        return Console(stderr=stderr, highlight=False, emoji=False)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True, highlight=False, emoji=False)


class PlainReport:
    """A report for a pipe: lines as written; a table is its title, then its header and rows as right-aligned
    columns two spaces apart."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def line(self, text: str, bold: bool = False) -> None:
        self.stream.write(text + "\n")

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], bold_last: bool = False) -> None:
        widths = [max(len(cell) for cell in column) for column in zip(columns, *rows)]
        lines = [title, *("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in (columns, *rows))]
        self.stream.write("\n".join(lines) + "\n")


class RichReport:
    """A report for people: rich tables with right-aligned cells, the same lines, bold where asked."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def line(self, text: str, bold: bool = False) -> None:
        self.console.print(text, style="bold" if bold else None, markup=False)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], bold_last: bool = False) -> None:
        from rich.table import Table

        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column, justify="right")
        for i, row in enumerate(rows):
            table.add_row(*row, style="bold" if bold_last and i == len(rows) - 1 else None)
        self.console.print(table)


def output_report() -> PlainReport | RichReport:
    """Where a run's report goes: rich tables for people, plain columns for a pipe."""
    return RichReport(output_console()) if for_people(sys.stdout) else PlainReport(sys.stdout)
