"""`pipedeck compare RUN RUN [...]`: latency CDFs, time breakdowns, metrics and pipeline timelines in one HTML page.

Runs are compared like with like: legends name the settings that differ, a
warning says when scenario, model, hardware or rate differ, and a study's
best and default are each shown at both their goodput rates
(console/comparison.py, which the console's Runs view shares).
"""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

import click

from ..store import RunStore
from ..tuner import Slo, study_runs
from .comparison import compare_runs, write_pngs
from .db import READ_LOCK_WAIT_S, DbOptions, db_option, db_path
from .options import check_writable
from .plots.gantt import MAX_SPANS
from .tunespec import slo_option


class CompareOptions(DbOptions):
    """`pipedeck compare`'s options beside its RUN ids (--slo parsed by its callback)."""

    out: str
    study: str | None
    slo: Slo | None
    png: bool
    max_spans: int


@click.command()
@click.argument("run_ids", metavar="[RUN RUN ...]", nargs=-1, type=int)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@db_option
@click.option(
    "--study", default=None, help="Compare this study's best and default runs, like with like (instead of RUN ids)."
)
@click.option(
    "--slo",
    default=None,
    callback=slo_option,
    help="Draw SLO limits such as ttft=2s,tpot=200ms (default: the runs' study SLO).",
)
@click.option("--png", is_flag=True, help="Also write one PNG per figure beside the HTML (needs kaleido).")
@click.option(
    "--max-spans",
    type=click.IntRange(min=1),
    default=MAX_SPANS,
    show_default=True,
    help="Timeline spans drawn for all runs together (one time window for all).",
)
def compare(run_ids: tuple[int, ...], **opts: Unpack[CompareOptions]) -> None:
    """Compare stored runs (ids from `pipedeck runs`) in one self-contained HTML page.

    A study's best and default runs (or --study) are each shown at both their goodput rates.
    """
    if opts["study"] is not None and run_ids:
        raise click.UsageError("give run ids or --study, not both")
    if opts["study"] is None and len(run_ids) < 2:
        raise click.UsageError("compare needs at least two run ids, e.g. pipedeck compare 3 4 --out compare.html")
    repeated = sorted({i for i in run_ids if run_ids.count(i) > 1})
    if repeated:
        raise click.BadParameter(f"run {repeated[0]} is given twice", param_hint="RUN")
    out = Path(opts["out"])
    check_writable(str(out), "--out")
    db = db_path(opts)
    with RunStore.open(db, read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
        stored = study_runs(store, opts["study"]) if opts["study"] else [store.get_run(i) for i in run_ids]
    chosen, _, sections = compare_runs(db, stored, out, opts["slo"], opts["max_spans"])
    for line in chosen.warnings:
        click.echo(f"pipedeck: warning: {line}", err=True)
    click.echo(f"wrote {out}")
    for line in chosen.notes:
        click.echo(line)
    if opts["png"]:
        for line in write_pngs(sections, out):
            click.echo(line)
