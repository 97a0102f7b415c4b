"""What a live server reported about itself while a run went: running and waiting requests, KV use."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import PlotRun, run_lines, styled

if TYPE_CHECKING:
    from ...backends import Sample

GAUGES = (("running", "running requests"), ("waiting", "waiting requests"), ("kv_usage", "KV cache used"))


def scraped(runs: Sequence[PlotRun]) -> list[tuple[int, PlotRun, list[Sample]]]:
    """The runs (with their index, for colours) whose server metrics were scraped at least once, and the scrapes."""
    return [
        (i, run, run.result.live.server.samples)
        for i, run in enumerate(runs)
        if run.result.live is not None and run.result.live.server is not None and run.result.live.server.samples
    ]


def server_gauges(runs: Sequence[PlotRun]) -> go.Figure:
    """One panel per gauge some run's engine reported, a line per run against seconds since its start.

    A gauge an engine does not expose is absent from that run's line, not drawn at 0.
    """
    shown = scraped(runs)
    lines = run_lines([run.result for run in runs])
    gauges = [g for g in GAUGES if any(g[0] in s.values for _, _, samples in shown for s in samples)]
    fig = make_subplots(
        rows=len(gauges) or 1,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[label for _, label in gauges],
    )
    for row, (key, label) in enumerate(gauges, start=1):
        for index, run, samples in shown:
            points = [(s.time_s, value) for s in samples if isinstance(value := s.values.get(key), int | float)]
            if not points:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[time_s for time_s, _ in points],
                    y=[float(value) for _, value in points],
                    name=run.name,
                    legendgroup=run.name,
                    showlegend=row == 1,
                    mode="lines",
                    line=dict(**lines[index], shape="hv"),
                    hovertemplate=f"{run.name}<br>%{{x:.3g}} s: {label} %{{y}}<extra></extra>",
                ),
                row=row,
                col=1,
            )
        if key == "kv_usage":
            fig.update_yaxes(tickformat=".0%", rangemode="tozero", row=row, col=1)
        else:
            fig.update_yaxes(rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="seconds since the run started", row=len(gauges) or 1, col=1)
    return styled(fig, "Server gauges as scraped from /metrics", 200 + 180 * len(gauges), legend_row=True)
