"""Where each run's time went: compute, exposed communication, bubble and idle, stacked."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import PlotRun, styled, wrap

PARTS = (("compute", "compute", "#4c78a8"), ("exposed_comm", "exposed communication", "#f58518"),
         ("bubble", "bubble", "#e45756"), ("idle", "idle (no work queued)", "#bab0ac"))


def time_breakdown(runs: Sequence[PlotRun]) -> go.Figure:
    """Stacked seconds per run (mean over ranks) beside stacked seconds per rank, grouped by run."""
    fig = make_subplots(rows=1, cols=2, column_widths=[0.32, 0.68], horizontal_spacing=0.08,
                        subplot_titles=("mean over ranks", "per rank"))
    names = [wrap(run.name) for run in runs]
    groups = [wrap(run.name) for run in runs for _ in run.result.ranks]
    ranks = [f"rank {r.rank}" for run in runs for r in run.result.ranks]
    for key, label, colour in PARTS:
        means = [run.result.breakdown()[key] for run in runs]
        shares = [m / (run.result.makespan_s or 1.0) for m, run in zip(means, runs)]
        fig.add_trace(go.Bar(
            x=names, y=means, name=label, legendgroup=key, marker_color=colour, customdata=shares,
            hovertemplate=f"%{{x}}<br>{label} %{{y:.4g}} s (%{{customdata:.1%}} of makespan)<extra></extra>",
        ), row=1, col=1)
        per_rank = [getattr(r, key) for run in runs for r in run.result.ranks]
        spans = [run.result.makespan_s or 1.0 for run in runs for _ in run.result.ranks]
        fig.add_trace(go.Bar(
            x=[groups, ranks], y=per_rank, name=label, legendgroup=key, showlegend=False,
            marker_color=colour, customdata=[v / s for v, s in zip(per_rank, spans)],
            hovertemplate=f"%{{x}}<br>{label} %{{y:.4g}} s (%{{customdata:.1%}} of makespan)<extra></extra>",
        ), row=1, col=2)
    fig.update_yaxes(title_text="seconds", row=1, col=1)
    fig = styled(fig, "Time breakdown: compute / exposed communication / bubble / idle", 500, legend_row=True)
    return fig.update_layout(barmode="stack", bargap=0.25)
