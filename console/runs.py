"""`pipedeck runs`: list the runs in the store, newest first."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Unpack

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from .. import store as run_store  # its RunStore, and DuckDB with it, loads on first use
from ..backends import MODES
from ..store import RunRow
from .db import READ_LOCK_WAIT_S, DbOptions, db_option, db_path
from .output import output_console
from .run_cells import row_cells


class RunsOptions(DbOptions):
    """`pipedeck runs`' options."""

    study: str | None
    scenario: str | None
    mode: str | None
    limit: int | None
    as_json: bool


@click.command()
@db_option
@click.option("--study", default=None, help="Only runs of this tuning study.")
@click.option("--scenario", default=None, help="Only runs of this scenario.")
@click.option("--mode", type=click.Choice(list(MODES)), default=None, help="Only runs in this pipeline mode.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Show at most N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def runs(**opts: Unpack[RunsOptions]) -> None:
    """List stored runs, newest first."""
    path = db_path(opts)
    with run_store.RunStore.open(path, read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
        rows = store.list_runs(study=opts["study"], scenario=opts["scenario"], mode=opts["mode"], limit=opts["limit"])
        studies = [study.name for study in store.list_studies()] if opts["study"] and not rows else []
    if opts["as_json"]:
        click.echo(json.dumps([row_json(row) for row in rows], indent=2))
    elif not rows:
        click.echo(_none_text(path, opts, studies))
    else:
        output_console().print(runs_table(rows, path))


def _none_text(path: Path, opts: RunsOptions, studies: list[str]) -> str:
    """Why nothing is listed: no runs at all, no runs of that study (and the studies there), or none matching."""
    if opts["study"]:
        return f"no runs of study {opts['study']} in {path}; studies there: {', '.join(studies) or 'none'}"
    filters = [f"--{name} {value}" for name, value in (("scenario", opts["scenario"]), ("mode", opts["mode"])) if value]
    return f"no runs in {path} match {' '.join(filters)}" if filters else f"no runs in {path}"


def row_json(row: RunRow) -> dict[str, object]:
    """One listed run as a JSON object."""
    return {**asdict(row), "created_at": row.created_at.isoformat()}


def runs_table(rows: list[RunRow], path: Path) -> Table:
    """The listed runs as a rich table (fits 80 columns; --json has every field)."""
    table = Table(
        title=f"runs in {escape(str(path))}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    fixed = {"id": 3, "created": 11, "config": 13, "TTFT p90": 8, "TPOT p90": 8, "bubble": 6}
    for col in ("id", "created", "scenario", "model", "config", "TTFT p90", "TPOT p90", "bubble", "label"):
        if col in fixed:  # always shown whole; the text columns share what is left
            table.add_column(
                col, justify="left" if col in ("created", "config") else "right", no_wrap=True, min_width=fixed[col]
            )
        else:
            table.add_column(col, no_wrap=True, overflow="ellipsis", ratio=1)
    for r in rows:
        table.add_row(*map(escape, row_cells(r)))
    return table
