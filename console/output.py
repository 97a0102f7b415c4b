"""Output for people and for pipes: the terminal's width on a terminal; never wrapped or cut in a pipe."""

from __future__ import annotations

import os
import sys

from rich.console import Console

PIPE_WIDTH = 1000  # wide enough that no table or line is folded when the reader is a file or another program


def output_console(stderr: bool = False) -> Console:
    """A rich Console that fits the terminal, or (piped, with no $COLUMNS) lets tables take their natural
    width and prints prose as unbroken lines, so grep and logs see whole rows."""
    stream = sys.stderr if stderr else sys.stdout
    # highlight=False: what pipedeck prints is styled where it means something, not by rich's guesses at numbers
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(stderr=stderr, highlight=False)
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True, highlight=False)
