"""`pipedeck console`: the interactive console over the run store."""

from __future__ import annotations

from typing import Unpack

import click
import optuna

from ..store import RunStore
from .db import WRITE_LOCK_WAIT_S, DbOptions, db_option, db_path


@click.command()
@db_option
def console(**opts: Unpack[DbOptions]) -> None:
    """Open the interactive console: live runs, tuning, stored runs and the config form."""
    path = db_path(opts)
    RunStore.open(path, lock_timeout_s=WRITE_LOCK_WAIT_S).close()  # a bad --db fails here, before the screen opens
    from .tui import PipedeckApp  # Textual loads only for this command

    # Optuna's log handler writes to stderr, the terminal the console draws on; the views report what goes wrong
    # themselves. (Quitting during a study prints nothing even with it: see tests/console/tui/test_tui_tune.py.)
    optuna.logging.disable_default_handler()
    PipedeckApp(path).run()
