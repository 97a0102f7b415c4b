"""The compare page's metrics table: config and metrics per run, deltas against the first run."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import plotly.graph_objects as go

from ...backends import RunResult, RunSummary
from ...tuner import Slo
from .common import PlotRun, styled
from .config_text import split_text, tokens_text

BETTER, WORSE, PLAIN = "#1e8449", "#c0392b", "#222"
DELTAS_NOTE = "deltas against the first run of the same scenario and rate, marked better or worse"
CELL_PX = 30  # a row of one line
LINE_PX = 18  # each further line of a row whose text wraps
PLANNED_PX = 1000  # the narrowest figure the height is planned for: a wider page wraps less, leaving room below
CHAR_PX = 7.5  # an average character of the table's 13 px text, bold
PAD_PX = 16  # a cell's padding, both sides together


@dataclass(frozen=True)
class Row:
    """One table row: how to read the value from a run, how to print it, and which way is better."""

    label: str
    value: Callable[[RunResult, RunSummary], str | float | None]  # None: n/a
    fmt: str = ""  # format spec of a numeric row; empty for text rows (no delta)
    better: str | None = None  # "low" or "high" colours the delta; None leaves it plain
    points: bool = False  # deltas in percentage points (for ratios) rather than relative


def _pct(
    metric: Literal["ttft_s", "tpot_s"], p: str, scale: float = 1.0
) -> Callable[[RunResult, RunSummary], float | None]:
    """A percentile from the summary; None (n/a) where no request has the metric (TPOT of one-token outputs)."""

    def read(r: RunResult, s: RunSummary) -> float | None:
        quantiles = s[metric]
        return None if quantiles is None else quantiles[p] * scale

    return read


def _cfg(key: str, show: Callable[[object], str] = str) -> Callable[[RunResult, RunSummary], str]:
    return lambda r, s: "-" if r.config.get(key) is None else show(r.config[key])


ROWS = (
    Row("scenario", lambda r, s: r.scenario),
    Row("requests", lambda r, s: str(s["requests"])),
    Row("rate (req/s)", lambda r, s: "scenario default" if r.rate is None else f"{r.rate:.4g}"),
    Row("mode", _cfg("mode")),
    Row("tp × pp", lambda r, s: f"{r.config.get('tp')} × {r.config.get('pp')}"),
    Row("chunk (tokens)", _cfg("chunk", tokens_text)),
    Row("layer split", _cfg("layer_split", split_text)),
    Row("TTFT P50 (s)", _pct("ttft_s", "p50"), ".4g", "low"),
    Row("TTFT P90 (s)", _pct("ttft_s", "p90"), ".4g", "low"),
    Row("TTFT P99 (s)", _pct("ttft_s", "p99"), ".4g", "low"),
    Row("TPOT P50 (ms)", _pct("tpot_s", "p50", 1e3), ".4g", "low"),
    Row("TPOT P90 (ms)", _pct("tpot_s", "p90", 1e3), ".4g", "low"),
    Row("TPOT P99 (ms)", _pct("tpot_s", "p99", 1e3), ".4g", "low"),
    Row("throughput (tok/s)", lambda r, s: s["throughput_tok_s"], ",.0f", "high"),
    Row("makespan (s)", lambda r, s: s["makespan_s"], ".4g", "low"),
    Row("bubble ratio", lambda r, s: s["bubble_ratio"], ".1%", "low", points=True),
    Row("steps", lambda r, s: s["steps"], ",d"),
    Row("chunks", lambda r, s: s["chunks"], ",d"),
)


def _verdict(slo: Slo, result: RunResult) -> str:
    """met or missed, naming the limits the run has no value for (they hold: nothing to exceed them)."""
    verdict = "met" if slo.met(result) else "missed"
    undefined = slo.undefined(result)
    return verdict + (f" ({', '.join(undefined)} n/a)" if undefined else "")


def _slo_rows(slo: Slo) -> tuple[Row, ...]:
    return (
        Row(f"SLO {slo.text()}", lambda r, s: _verdict(slo, r)),
        Row("SLO attainment", lambda r, s: slo.attainment(r), ".1%", "high", points=True),
    )


def _delta(row: Row, value: float, base: float) -> tuple[str, str]:
    """The delta text against the first run's value and its colour; a row with a better way round says in words
    whether the delta is better or worse, so that the colour is never the only cue."""
    diff = value - base
    if diff == 0:
        return "", PLAIN
    if row.points:
        text = f"{diff * 100:+.1f} pp"
    elif base == 0:
        return "", PLAIN
    else:
        text = f"{diff / abs(base):+.1%}"
    if row.better is None:
        return f" ({text})", PLAIN
    better = (diff < 0) == (row.better == "low")
    return f" ({text}, {'better' if better else 'worse'})", BETTER if better else WORSE


@dataclass(frozen=True)
class Cell:
    """One value of the table: its text and colour (PLAIN unless its delta is better or worse)."""

    text: str
    colour: str = PLAIN


def metric_rows(slo: Slo | None = None) -> tuple[Row, ...]:
    """The table's rows, with the SLO's verdict and attainment when one is given."""
    return ROWS + (_slo_rows(slo) if slo is not None else ())


def references(results: Sequence[RunResult]) -> list[int]:
    """Per run, the index of the run its deltas are against: the first with the same scenario and rate
    (itself when it is the first; runs under other traffic are not compared like with like)."""
    first: dict[tuple[str, float | None], int] = {}
    return [first.setdefault((r.scenario, r.rate), i) for i, r in enumerate(results)]


def run_cells(results: Sequence[RunResult], slo: Slo | None = None) -> list[list[Cell]]:
    """Per run, one cell per row; numbers carry their delta against the first run of the same scenario and rate."""
    rows = metric_rows(slo)
    summaries = [result.summary() for result in results]
    values = [[row.value(result, summary) for row in rows] for result, summary in zip(results, summaries)]
    columns = []
    for index, ref in enumerate(references(results)):
        cells = []
        for row, value, base in zip(rows, values[index], values[ref]):
            if value is None:  # not measured (a live server counts no steps) or not there (no TPOT): never 0
                cells.append(Cell("n/a"))
                continue
            if not row.fmt:
                cells.append(Cell(str(value)))
                continue
            delta, tint = _delta(row, float(value), float(base)) if ref != index and base is not None else ("", PLAIN)
            cells.append(Cell(format(value, row.fmt) + delta, tint))
        columns.append(cells)
    return columns


def rows_px(rows: Sequence[Sequence[str]], shares: Sequence[float], margins_px: int) -> int:
    """The height of these table rows (each a text per column) with their text wrapped as a PLANNED_PX wide figure
    wraps it, its columns taking these shares of the width left by the margins."""
    chars = [max(1, int(((PLANNED_PX - margins_px) * share / sum(shares) - PAD_PX) / CHAR_PX)) for share in shares]
    lines = [max(len(textwrap.wrap(text, width)) or 1 for text, width in zip(row, chars)) for row in rows]
    return sum(CELL_PX + 1 + LINE_PX * (n - 1) for n in lines)


def metrics_table(runs: Sequence[PlotRun], slo: Slo | None = None) -> go.Figure:
    """A table with one column per run; numeric cells carry their delta against the first run of the same scenario
    and rate, green and "better" or red and "worse". The figure is as tall as its rows wrap on a narrow page."""
    rows = metric_rows(slo)
    cells = run_cells([run.result for run in runs], slo)
    header = ["metric", *(run.name for run in runs)]
    columns = [[row.label for row in rows], *([c.text for c in column] for column in cells)]
    colours = [[PLAIN] * len(rows), *([c.colour for c in column] for column in cells)]
    shares = [1.3] + [1.0] * len(runs)
    fig = go.Figure(
        go.Table(
            columnwidth=shares,
            header=dict(
                values=[f"<b>{text}</b>" for text in header], fill_color="#eef1f5", align="left", font=dict(size=13)
            ),
            cells=dict(
                values=[[f"<b>{label}</b>" for label in columns[0]], *columns[1:]],
                align="left",
                font=dict(color=colours, size=13),
                height=CELL_PX,
                fill_color=[["#ffffff", "#f8f9fb"] * len(rows)],
            ),
        )
    )
    margin = dict(l=20, r=20, t=60, b=10)
    height = margin["t"] + margin["b"] + 20 + rows_px([header, *zip(*columns)], shares, margin["l"] + margin["r"])
    fig = styled(fig, f"Metrics ({DELTAS_NOTE})", height)
    fig.update_layout(margin=margin)
    return fig
