"""`pipedeck compare RUN RUN [...]`: latency CDFs, time breakdowns, metrics and pipeline timelines in one HTML page."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import click
import plotly.io as pio

from ..store import RunStore, StoredRun
from ..tuner.confidence import interval_text
from ..tuner.slo import SLO, parse_slo
from .options import check_writable
from .plots import PlotRun, Section, latency_cdfs, metrics_table, page, run_name, time_breakdown, timelines
from .plots.common import slo_from_dict
from .plots.gantt import MAX_SPANS
from .plots.server import scraped, server_gauges
from .runs import READ_LOCK_WAIT_S, db_option, db_path, local_time

PNG_HINT = "png: skipped: PNG export needs kaleido: pip install 'pipedeck[png]'"


@click.command()
@click.argument("run_ids", metavar="RUN RUN [...]", nargs=-1, type=int)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@db_option
@click.option("--slo", default=None, help="Draw SLO limits such as ttft=2s,tpot=200ms (default: the runs' study SLO).")
@click.option("--png", is_flag=True, help="Also write one PNG per figure beside the HTML (needs kaleido).")
@click.option("--max-spans", type=click.IntRange(min=1), default=MAX_SPANS, show_default=True,
              help="Timeline spans drawn for all runs together (each run's first ones in time).")
def compare(run_ids: tuple[int, ...], **opts: object) -> None:
    """Compare stored runs (ids from `pipedeck runs`) in one self-contained HTML page."""
    if len(run_ids) < 2:
        raise click.UsageError("compare needs at least two run ids, e.g. pipedeck compare 3 4 --out compare.html")
    repeated = sorted({i for i in run_ids if run_ids.count(i) > 1})
    if repeated:
        raise click.BadParameter(f"run {repeated[0]} is given twice", param_hint="RUN")
    slo = parse_slo(str(opts["slo"])) if opts["slo"] else None
    out = Path(str(opts["out"]))
    check_writable(str(out), "--out")
    with RunStore.open(db_path(opts), read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
        stored = [store.get_run(i) for i in run_ids]
        if slo is None:
            slo = study_slo(store, stored)
        intervals = trial_intervals(store, stored)
    sections = write_compare_page(stored, slo, out, int(opts["max_spans"]), intervals)
    click.echo(f"wrote {out}")
    if opts["png"]:
        for line in write_pngs(sections, out):
            click.echo(line)


def write_compare_page(stored: list[StoredRun], slo: SLO | None, out: Path, max_spans: int = MAX_SPANS,
                       intervals: dict[int, dict] | None = None) -> list[Section]:
    """Write the comparison page of these stored runs to `out`; return its sections (for the PNGs)."""
    sections = compare_sections(stored, slo, max_spans)
    title = f"pipedeck compare: runs {', '.join(str(s.id) for s in stored)}"
    out.write_text(page(title, _meta(stored, slo, intervals or {}), sections), encoding="utf-8")
    return sections


def trial_intervals(store: RunStore, stored: list[StoredRun]) -> dict[int, dict]:
    """Run id -> the goodput interval `tune --repeats` measured for the run's trial, where there is one."""
    found = {}
    for s in stored:
        if s.study is None or s.trial is None:
            continue
        trial = next((t for t in store.trials(s.study) if t.number == s.trial), None)
        if trial is not None and trial.metrics.get("goodput_ci"):
            found[s.id] = trial.metrics["goodput_ci"]
    return found


def study_slo(store: RunStore, stored: list[StoredRun]) -> SLO | None:
    """The SLO of the first run's study that has one (a study since deleted is skipped)."""
    limits = {study.name: study.slo for study in store.list_studies()}
    return next((slo_from_dict(limits[s.study]) for s in stored if limits.get(s.study or "")), None)


def _meta(stored: list[StoredRun], slo: SLO | None, intervals: dict[int, dict]) -> list[str]:
    """The page's header lines: what each run is (with its trial's goodput interval), and the SLO drawn."""
    lines = []
    for s in stored:
        r = s.result
        origin = f", study {s.study} trial {s.trial}" if s.study is not None else ""
        if s.id in intervals:
            origin += f", goodput {interval_text(intervals[s.id])}"
        lines.append(f"{run_name(s.id, r, s.label)}: {r.scenario}, {r.config.get('model')} on "
                     f"{r.config.get('hardware')}, {r.backend} backend, seed {r.seed}, "
                     f"stored {local_time(s.created_at)}{origin}")
    lines.append(f"SLO: {slo.text()}" if slo is not None else "SLO: none (give --slo ttft=2s,tpot=200ms to draw it)")
    return lines


def compare_sections(stored: list[StoredRun], slo: SLO | None, max_spans: int) -> list[Section]:
    """The page's sections for these runs; the per-rank ones leave out runs without a timeline (live ones)."""
    runs = [PlotRun(run_name(s.id, s.result, s.label), s.result) for s in stored]
    ranked = [run for run in runs if run.result.ranks]
    without = ", ".join(run.name for run in runs if not run.result.ranks)
    left_out = f" Not shown: {without} (a live server has no per-rank timeline)." if without else ""
    sections = [
        Section("Latency", latency_cdfs(runs, slo.to_dict() if slo else None), key="cdf",
                note="Empirical CDFs over all requests; dashed lines are the SLO limits, dotted lines their "
                     "percentile."),
        Section("Metrics", metrics_table(runs, slo), key="metrics"),
    ]
    if scraped(runs):
        sections.append(Section("Server gauges", server_gauges(runs), key="server",
                                note="What each live server's /metrics said during the run (scraped about once a "
                                     "second); a gauge its engine does not expose is not drawn."))
    if ranked:
        sections.insert(1, Section(
            "Where the time went", time_breakdown(ranked), key="breakdown",
            note="Per-rank time splits exactly into compute, exposed communication, bubble (waiting while the "
                 "pipeline is busy elsewhere; a single rank has none) and idle (waiting for work), drawn as shares "
                 "of each run's makespan so that runs of different lengths compare; hover for the seconds."
                 + left_out))
        sections.append(Section(
            "Pipeline timelines", timelines(ranked, max_spans), key="timeline",
            note="One row per rank, every run over the same time window; bar colour is the micro-batch's lead "
                 "request, labels are virtual stage and chunk (s<stage> c<chunk>, d for decode-only). Drag to zoom; "
                 "double-click to reset." + left_out))
    return sections


def kaleido_installed() -> bool:
    """Whether the optional PNG engine is importable."""
    return importlib.util.find_spec("kaleido") is not None


def write_pngs(sections: list[Section], out: Path) -> list[str]:
    """Write <out>-<figure>.png for each figure with kaleido; lines to print (a hint when kaleido is missing)."""
    if not kaleido_installed():
        return [PNG_HINT]
    figures = [s for s in sections if s.figure is not None]
    paths = [out.with_name(f"{out.stem}-{s.key}.png") for s in figures]
    try:
        pio.write_images([s.figure for s in figures], paths, width=1400,
                         height=[s.figure.layout.height for s in figures])
    except Exception as err:  # noqa: BLE001 - kaleido and its browser raise many kinds; the HTML is written already
        return [f"png: skipped: kaleido could not run: {str(err).strip().splitlines()[0]}"]
    return [f"wrote {p}" for p in paths]
