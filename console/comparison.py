"""Comparing stored runs like with like, and the HTML page (and PNGs) that shows them.

What `pipedeck compare` and the console's Runs view both draw: legends name
the settings that differ, a warning says when scenario, model, hardware or
rate differ, and a study's best and default are each shown at both their
goodput rates.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import plotly.io as pio

from ..store import RunStore, StoredRun
from ..tuner import Interval, Slo, interval_text, like_for_like, stored_interval
from .db import READ_LOCK_WAIT_S, local_time
from .plots import PlotRun, Section, latency_cdfs, metrics_table, page, time_breakdown, timelines
from .plots.gantt import MAX_SPANS
from .plots.naming import legend_names, mismatch_warnings, run_heads
from .plots.server import scraped, server_gauges

PNG_HINT = "png: skipped: PNG export needs kaleido: pip install 'pipedeck[png]'"


@dataclass(frozen=True)
class Comparison:
    """Runs in page order, their legend names, and what the page says before its figures."""

    stored: list[StoredRun]
    names: list[str]
    heads: list[str]  # each name's start: the run, its backend and label (a table column's header)
    warnings: list[str]  # settings that make the runs' latencies incomparable
    notes: list[str]  # how the runs were chosen (a study's best and default, like with like)


def comparison(stored: list[StoredRun], notes: list[str] | None = None) -> Comparison:
    """The comparison of these runs: legends naming the settings that differ, warnings for the ones that matter."""
    ids, results, labels = [s.id for s in stored], [s.result for s in stored], [s.label for s in stored]
    return Comparison(
        stored,
        legend_names(ids, results, labels),
        run_heads(ids, results, labels),
        mismatch_warnings(ids, results),
        list(notes or []),
    )


def prepare(db: Path, stored: list[StoredRun]) -> Comparison:
    """The comparison to draw: a study's best and default at different rates are measured at each other's
    rate first (simulated once, then read from the store)."""
    chosen = like_for_like(db, stored)
    return comparison(chosen.runs, [chosen.note] if chosen.note else [])


def compare_runs(
    db: Path, stored: list[StoredRun], out: Path, slo: Slo | None = None, max_spans: int = MAX_SPANS
) -> tuple[Comparison, Slo | None, list[Section]]:
    """Choose what to compare (a study's best and default like with like), take the SLO (else their study's) and
    their trials' goodput intervals from the store, and write the page: what `pipedeck compare` and the
    console's Runs view both do."""
    chosen = prepare(db, stored)
    with RunStore.open(db, read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
        slo = slo if slo is not None else study_slo(store, chosen.stored)
        intervals = trial_intervals(store, chosen.stored)
    return chosen, slo, write_compare_page(chosen, slo, out, max_spans, intervals)


def write_compare_page(
    chosen: Comparison,
    slo: Slo | None,
    out: Path,
    max_spans: int = MAX_SPANS,
    intervals: dict[int, Interval] | None = None,
) -> list[Section]:
    """Write the comparison page to `out`; return its sections (for the PNGs)."""
    sections = compare_sections(chosen, slo, max_spans)
    title = f"pipedeck compare: runs {', '.join(str(s.id) for s in chosen.stored)}"
    out.write_text(page(title, _meta(chosen, slo, intervals or {}), sections, chosen.warnings), encoding="utf-8")
    return sections


def trial_intervals(store: RunStore, stored: list[StoredRun]) -> dict[int, Interval]:
    """Run id -> the goodput interval `tune --repeats` measured for the run's trial, where there is one."""
    found = {}
    for s in stored:
        if s.study is None or s.trial is None:
            continue
        trial = next((t for t in store.trials(s.study) if t.number == s.trial), None)
        ci = None if trial is None else stored_interval(trial.metrics)
        if ci:
            found[s.id] = ci
    return found


def study_slo(store: RunStore, stored: list[StoredRun]) -> Slo | None:
    """The SLO of the first run's study that has one (a study since deleted is skipped)."""
    limits = {study.name: study.slo for study in store.list_studies()}
    return next((Slo.from_dict(limits[s.study]) for s in stored if s.study is not None and limits.get(s.study)), None)


def _meta(chosen: Comparison, slo: Slo | None, intervals: dict[int, Interval]) -> list[str]:
    """The page's header lines: how the runs were chosen, what each is (with its trial's goodput interval),
    and the SLO drawn."""
    lines = list(chosen.notes)
    for s, name in zip(chosen.stored, chosen.names):
        r = s.result
        origin = f", study {s.study} trial {s.trial}" if s.study is not None else ""
        if s.id in intervals:
            origin += f", goodput {interval_text(intervals[s.id])}"
        rate = "the scenario's rate" if r.rate is None else f"{r.rate:.4g} req/s"
        lines.append(
            f"{name}: {r.scenario} at {rate}, {r.config.get('model')} on "
            f"{r.config.get('hardware')}, {r.backend} backend, seed {r.seed}, "
            f"stored {local_time(s.created_at)}{origin}"
        )
    lines.append(f"SLO: {slo.text()}" if slo is not None else "SLO: none (give --slo ttft=2s,tpot=200ms to draw it)")
    return lines


def compare_sections(chosen: Comparison, slo: Slo | None, max_spans: int) -> list[Section]:
    """The page's sections for these runs; the per-rank ones leave out runs without a timeline (live ones not
    profiled)."""
    runs = [PlotRun(name, s.result) for name, s in zip(chosen.names, chosen.stored)]
    ranked = [run for run in runs if run.result.ranks]
    without = ", ".join(run.name for run in runs if not run.result.ranks)
    left_out = (
        f" Not shown: {without} (a live run has a per-rank timeline only when profiled: pipedeck run --profile-dir)."
        if without
        else ""
    )
    measured = (
        " A measured timeline (a live run, from the engine's profiler) names no request: its steps are labelled "
        "p, m and d (prefill, mixed, decode) and its batch is the step's number."
        if any(run.result.measured_timeline for run in ranked)
        else ""
    )
    sections = [
        Section(
            "Latency",
            latency_cdfs(runs, slo.to_dict() if slo else None),
            key="cdf",
            note="Empirical CDFs over all requests; dashed lines are the SLO limits, dotted lines their percentile.",
        ),
        Section("Metrics", metrics_table(runs, slo), key="metrics"),
    ]
    if scraped(runs):
        sections.append(
            Section(
                "Server gauges",
                server_gauges(runs),
                key="server",
                note="What each live server's /metrics said during the run (scraped about once a "
                "second); a gauge its engine does not expose is not drawn.",
            )
        )
    if ranked:
        sections.insert(
            1,
            Section(
                "Where the time went",
                time_breakdown(ranked),
                key="breakdown",
                note="Per-rank time splits exactly into compute, exposed communication, bubble (waiting while the "
                "pipeline is busy elsewhere; a single rank has none) and idle (waiting for work), drawn as shares "
                "of each run's makespan so that runs of different lengths compare; hover for the seconds." + left_out,
            ),
        )
        sections.append(
            Section(
                "Pipeline timelines",
                timelines(ranked, max_spans),
                key="timeline",
                note="One row per rank, every run over the same time window; bar colour is the micro-batch's lead "
                "request, labels are virtual stage and chunk (s<stage> c<chunk>, d for decode-only); hover a bar "
                "for its request, chunk and times. Drag to zoom; double-click to reset. A long run is drawn from its "
                "start up to a span budget (pipedeck compare --max-spans); the title says what part is shown."
                + measured
                + left_out,
            )
        )
    return sections


def kaleido_installed() -> bool:
    """Whether the optional PNG engine is importable."""
    return importlib.util.find_spec("kaleido") is not None


def write_pngs(sections: list[Section], out: Path) -> list[str]:
    """Write <out>-<figure>.png for each figure with kaleido; lines to print (a hint when kaleido is missing)."""
    if not kaleido_installed():
        return [PNG_HINT]
    figures = [(s.key, s.figure) for s in sections if s.figure is not None]
    paths = [out.with_name(f"{out.stem}-{key}.png") for key, _ in figures]
    try:
        pio.write_images(
            [figure for _, figure in figures], paths, width=1400, height=[f.layout.height for _, f in figures]
        )
    except Exception as err:  # noqa: BLE001 - kaleido and its browser raise many kinds; the HTML is written already
        return [f"png: skipped: kaleido could not run: {str(err).strip().splitlines()[0]}"]
    return [f"wrote {p}" for p in paths]
