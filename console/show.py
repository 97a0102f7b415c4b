"""`pipedeck show RUN`: one stored run's config, latencies and per-rank breakdown."""

from __future__ import annotations

import json
from typing import Unpack

import click

from ..store import RunStore, StoredRun
from .db import READ_LOCK_WAIT_S, DbOptions, db_option, db_path, local_time
from .output import output_report
from .render import print_run
from .simulate import RunJson, run_json


class ShowOptions(DbOptions):
    """`pipedeck show`'s options beside its RUN."""

    as_json: bool


@click.command()
@click.argument("run_id", metavar="RUN", type=int)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def show(run_id: int, **opts: Unpack[ShowOptions]) -> None:
    """Show one stored run (its id from `pipedeck runs`)."""
    with RunStore.open(db_path(opts), read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
        stored = store.get_run(run_id)
    if opts["as_json"]:
        click.echo(json.dumps(stored_json(stored), indent=2))
        return
    out = output_report()
    out.line(header(stored), bold=True)
    print_run(stored.result, out)


def header(stored: StoredRun) -> str:
    """One line: the run's id, time, label, study and trial, backend, seed and rate."""
    parts = [f"run {stored.id}", local_time(stored.created_at)]
    if stored.label:
        parts.append(f"label {stored.label}")
    if stored.study is not None:
        parts.append(f"study {stored.study}" + ("" if stored.trial is None else f" trial {stored.trial}"))
    r = stored.result
    parts.append(f"backend {r.backend}  seed {r.seed}  rate {'-' if r.rate is None else f'{r.rate:g}'}")
    parts.append(f"timeline {len(r.spans)} spans")
    return "  ".join(parts)


class StoredRunJson(RunJson):
    """The JSON object `show --json` prints: the store's record of the run, then what `simulate --json` printed."""

    run_id: int
    created_at: str
    label: str | None
    study: str | None
    trial: int | None
    pipedeck_version: str
    spans: int


def stored_json(stored: StoredRun) -> StoredRunJson:
    """The JSON object `show --json` prints: store metadata plus what `simulate --json` printed."""
    return {
        "run_id": stored.id,
        "created_at": stored.created_at.isoformat(),
        "label": stored.label,
        "study": stored.study,
        "trial": stored.trial,
        "pipedeck_version": stored.pipedeck_version,
        "spans": len(stored.result.spans),
        **run_json(stored.result),
    }
