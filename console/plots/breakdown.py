"""Where each run's time went: compute, exposed communication, bubble and idle, stacked as shares of its makespan."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import PlotRun, styled, wrap

PARTS = (
    ("compute", "compute", "#4c78a8"),
    ("exposed_comm", "exposed communication", "#f58518"),
    ("bubble", "bubble", "#e45756"),
    ("idle", "idle (waiting for work)", "#bab0ac"),
)
_HOVER = "%{x}<br>{label} %{y:.1%} of the makespan (%{customdata:.4g} s)<extra></extra>"


def time_breakdown(runs: Sequence[PlotRun]) -> go.Figure:
    """Each run's time as shares of its own makespan (runs of different lengths compare like with like):
    the mean over ranks per run beside every rank, grouped by run; hover gives the seconds."""
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.32, 0.68],
        horizontal_spacing=0.08,
        subplot_titles=("mean over ranks", "per rank"),
    )
    names = [wrap(run.name) for run in runs]
    groups = [wrap(run.name) for run in runs for _ in run.result.ranks]
    ranks = [f"rank {r.rank}" for run in runs for r in run.result.ranks]
    for key, label, colour in PARTS:
        hover = _HOVER.replace("{label}", label)
        means = [run.result.breakdown()[key] for run in runs]
        spans = [run.result.makespan_s or 1.0 for run in runs]
        fig.add_trace(
            go.Bar(
                x=names,
                y=[m / s for m, s in zip(means, spans)],
                name=label,
                legendgroup=key,
                marker_color=colour,
                customdata=means,
                hovertemplate=hover,
            ),
            row=1,
            col=1,
        )
        per_rank = [getattr(r, key) for run in runs for r in run.result.ranks]
        rank_spans = [run.result.makespan_s or 1.0 for run in runs for _ in run.result.ranks]
        fig.add_trace(
            go.Bar(
                x=[groups, ranks],
                y=[v / s for v, s in zip(per_rank, rank_spans)],
                name=label,
                legendgroup=key,
                showlegend=False,
                marker_color=colour,
                customdata=per_rank,
                hovertemplate=hover,
            ),
            row=1,
            col=2,
        )
    fig.update_yaxes(title_text="share of the run's makespan", tickformat=".0%", range=[0, 1.0], row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.0], row=1, col=2)
    fig = styled(
        fig,
        "Time breakdown: compute / exposed communication / bubble / idle, as shares of each run's makespan",
        500,
        legend_row=True,
    )
    return fig.update_layout(barmode="stack", bargap=0.25)
