"""--db: the run store a command reads or writes, and how long it waits for another process holding it.

Apart from the `runs` command, so that simulate and the others load neither its tables nor the store's rows.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import click

from ..store import ENV_VAR, default_db_path

if TYPE_CHECKING:
    from click.decorators import FC  # what click.option decorates: a function or a command

READ_LOCK_WAIT_S = 5.0  # how long a reader waits for another process to let go of the file
WRITE_LOCK_WAIT_S = 30.0  # how long a finished run waits to be written


class DbOptions(TypedDict):
    """The value `db_option` adds to a command's options."""

    db: str | None


def db_option(fn: FC) -> FC:
    """--db FILE: the run store (default $PIPEDECK_DB, else ./pipedeck.duckdb)."""
    return click.option(
        "--db",
        type=click.Path(dir_okay=False),
        default=None,
        help=f"Run store, a DuckDB file (default: ${ENV_VAR}, else ./pipedeck.duckdb).",
    )(fn)


def db_path(opts: DbOptions) -> Path:
    """The store file the --db option names, or the default."""
    return default_db_path(opts["db"])


def local_time(value: datetime) -> str:
    """A stored UTC time as local wall-clock time."""
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
