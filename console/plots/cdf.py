"""Empirical CDFs of TTFT and TPOT, one line per run, with the SLO limits drawn in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .common import PlotRun, run_lines, styled

MAX_POINTS = 2000  # per line; larger runs are drawn at evenly spaced quantiles
_PANELS = (("ttft", "TTFT", "s", 1.0), ("tpot", "TPOT", "ms", 1e3))

SLO = Mapping[str, Mapping[str, float]]  # {"ttft": {"limit_s": 2.0, "percentile": 90.0}, ...}


def ecdf(values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their cumulative fractions, thinned to at most max_points steps."""
    xs = np.sort(values)
    ys = np.arange(1, xs.size + 1) / max(1, xs.size)
    if xs.size > max_points:
        keep = np.unique(np.linspace(0, xs.size - 1, max_points).round().astype(int))
        xs, ys = xs[keep], ys[keep]
    return xs, ys


def latency_cdfs(runs: Sequence[PlotRun], slo: SLO | None = None) -> go.Figure:
    """TTFT (s) and TPOT (ms) CDFs side by side; a dashed line at each SLO limit, dotted at its percentile."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "TPOT"), horizontal_spacing=0.08)
    lines = run_lines([run.result for run in runs])
    for col, (metric, title, unit, scale) in enumerate(_PANELS, start=1):
        absent = []
        for i, run in enumerate(runs):
            values = run.result.ttfts() if metric == "ttft" else run.result.tpots()
            values = values[~np.isnan(values)]  # a one-token output has no TPOT
            if not values.size:
                absent.append(run.name)
                continue
            xs, ys = ecdf(values * scale)
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    name=run.name,
                    legendgroup=run.name,
                    showlegend=col == 1,
                    line_shape="hv",
                    mode="lines+markers" if xs.size <= 20 else "lines",
                    line=dict(**lines[i], width=2),
                    hovertemplate=f"{run.name}<br>{title} %{{x:.4g}} {unit}<br>fraction %{{y:.3f}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
        if absent:
            fig.add_annotation(
                text=f"no {title} (one output token each): {', '.join(absent)}",
                showarrow=False,
                xref=f"x{col if col > 1 else ''} domain",
                yref=f"y{col if col > 1 else ''} domain",
                x=0.5,
                y=0.5,
                font=dict(color="#777"),
            )
        fig.update_xaxes(title_text=f"{title} ({unit})", rangemode="tozero", row=1, col=col)
        fig.update_yaxes(title_text="fraction of requests" if col == 1 else None, range=[0, 1.04], row=1, col=col)
        limit = (slo or {}).get(metric)
        if limit:
            pct = float(limit.get("percentile", 90.0))
            x = float(limit["limit_s"]) * scale
            fig.add_vline(
                x=x,
                line=dict(color="#c0392b", dash="dash", width=1.5),
                row=1,
                col=col,
                exclude_empty_subplots=False,
                annotation=dict(text=f"SLO P{pct:g} ≤ {x:g} {unit}", font=dict(color="#c0392b", size=12)),
                annotation_position="bottom right",
            )
            fig.add_hline(
                y=pct / 100,
                line=dict(color="#c0392b", dash="dot", width=1),
                row=1,
                col=col,
                exclude_empty_subplots=False,
            )
    return styled(fig, "Latency CDFs", 460, legend_row=True)
