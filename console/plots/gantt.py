"""Per-rank pipeline timelines (Gantt), one subplot per run, like the VPP paper's timeline figure.

Bars go from span start to span end on one row per rank, coloured by the
micro-batch's lead request (decode-only batches grey, blocking transfers
dark), labelled `s<stage> c<chunk>` where the bar is wide enough; gaps are
bubbles. A timeline measured by an engine's profiler names no request: its
prefill and mixed steps share one colour and are labelled `p` and `m`. Every run is drawn over one time window, so that equal lengths
mean equal times: the longest makespan, or, when the runs together have
more than `max_spans` spans (the page would grow too large), the window
from 0 in which they have `max_spans`.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from ...backends import TRANSFER_KINDS, Span
from .common import TOP_PX, PlotRun, styled

MAX_SPANS = 3000
REQUEST_COLOURS = qualitative.Pastel[:10]  # the palette's last colour is grey, kept for decode-only batches
DECODE_COLOUR, TRANSFER_COLOUR = "#b4b4b4", "#2e2e2e"
MEASURED_COLOUR = "#8fb3d9"  # a measured prefill or mixed step: the profiler names no request to colour it by
KINDS = ("prefill", "mixed", "decode", *sorted(TRANSFER_KINDS))  # trace order within a rank
ROW_PX, GAP_PX, BOTTOM_PX = 46, 80, 70  # per rank row; between runs (ticks and title); under the last
LABEL_SHARE = 1e-3  # bars narrower than this share of the drawn window get no text (too narrow at any sane zoom)
_WHEN = "<br>virtual stage %{customdata[0]} · batch %{customdata[1]}<br>%{base:.4f} – %{x:.4f} s<extra></extra>"
_LEAD = "request %{customdata[2]} chunk %{customdata[3]}"


def common_window(runs: Sequence[Sequence[Span]], makespans: Sequence[float], budget: int) -> float:
    """The end of the one window [0, end) drawn for every run: the longest makespan when all spans fit the
    budget, else the start of the first span over it (counting all runs' spans together, in time order)."""
    starts = sorted(s.start for spans in runs for s in spans)
    if len(starts) <= budget:
        return max(makespans, default=0.0)
    return starts[budget]


def _label(span: Span) -> str:
    """s<stage> c<chunk>, or the kind's initial where no chunk is named (d: decode-only; p, m: measured steps)."""
    return f"s{span.stage} " + (f"c{span.chunk}" if span.chunk >= 0 else span.kind[0])


def _typed(values: np.ndarray) -> dict[str, str]:
    """A float32 array as plotly.js's base64 typed-array spec (plotly.py leaves `base` as long JSON text)."""
    return {"dtype": "f4", "bdata": base64.b64encode(values.astype("<f4").tobytes()).decode()}


def _request_colours() -> dict[str, object]:
    """Marker settings colouring bars by request id with a discrete scale over REQUEST_COLOURS."""
    n = len(REQUEST_COLOURS)
    scale = [[edge / n, colour] for i, colour in enumerate(REQUEST_COLOURS) for edge in (i, i + 1)]
    return dict(colorscale=scale, cmin=-0.5, cmax=n - 0.5)


def _what(kind: str, *, unnamed: bool, measured: bool) -> str:
    """The hover's first line for bars of this kind (`unnamed`: they name no request)."""
    if kind == "decode" and unnamed:
        return "decode-only batch"
    if unnamed and measured:
        return f"{kind} (measured by the engine's profiler, which names no request)"
    if unnamed:
        return f"{kind} of a decode-only batch"
    return f"mixed: prefill {_LEAD} + decodes" if kind == "mixed" else f"{kind}: {_LEAD}"


def kind_trace(
    name: str, rank: int, kind: str, spans: Sequence[Span], min_label_s: float = 0.0, *, measured: bool = False
) -> go.Bar:
    """One rank's spans of one kind (all naming a request or none) as horizontal bars on row `rank`; `measured`:
    from an engine's profiler."""
    starts = np.array([s.start for s in spans], dtype=np.float64)
    widths = np.array([s.end for s in spans], dtype=np.float64) - starts
    transfer, unnamed = kind in TRANSFER_KINDS, spans[0].request < 0
    if transfer:
        marker: dict[str, object] = dict(color=TRANSFER_COLOUR)
    elif kind == "decode" and unnamed:
        marker = dict(color=DECODE_COLOUR)
    elif unnamed:
        marker = dict(color=MEASURED_COLOUR)
    else:
        marker = dict(
            color=np.array([s.request % len(REQUEST_COLOURS) for s in spans], dtype=np.int8), **_request_colours()
        )
    marker["line"] = dict(width=0.6 if len(spans) <= 300 else 0, color="white")
    # JSON integers: as base64 typed arrays, the -1 of decode-only batches would cost far more bytes
    customdata = [[s.stage, s.batch] if unnamed else [s.stage, s.batch, s.request, s.chunk] for s in spans]
    return go.Bar(
        name=f"{name} rank {rank} {kind}" + (" (decode-only)" if unnamed and transfer and not measured else ""),
        orientation="h",
        y=np.full(len(spans), rank, dtype=np.int8),
        base=_typed(starts),
        x=widths.astype(np.float32),
        width=0.8,
        marker=marker,
        showlegend=False,
        customdata=customdata,
        hovertemplate=f"<b>{name} rank {rank}</b><br>{_what(kind, unnamed=unnamed, measured=measured)}{_WHEN}",
        text=None if transfer else [_label(s) if w >= min_label_s else "" for s, w in zip(spans, widths)],
        textposition="inside",
        textangle=0,
        insidetextanchor="middle",
        textfont=dict(size=10, color="#1a1a1a"),
    )


def _title(run: PlotRun, drawn: list[Span], total: int, window: float) -> str:
    if not total:
        return f"{run.name}: stored without a timeline"
    name = f"{run.name} (measured)" if run.result.measured_timeline else run.name
    if len(drawn) == total:
        return f"{name}: all {total} spans, {run.result.makespan_s:.4g} s"
    return f"{name}: first {len(drawn)} of {total} spans (0–{window:.4g} s of {run.result.makespan_s:.4g} s)"


def _legend_keys(fig: go.Figure, *, measured: bool) -> None:
    """Legend entries explaining the colours (`measured`: also a measured timeline's)."""
    keys = (
        ("prefill / mixed batch: one colour per lead request", REQUEST_COLOURS[0]),
        *((("measured prefill / mixed step: no request named", MEASURED_COLOUR),) if measured else ()),
        ("decode-only batch", DECODE_COLOUR),
        ("communication (send / recv / exchange / wait)", TRANSFER_COLOUR),
    )
    for name, colour in keys:
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=name,
                hoverinfo="skip",
                marker=dict(symbol="square", size=13, color=colour),
            )
        )


def timelines(runs: Sequence[PlotRun], max_spans: int = MAX_SPANS) -> go.Figure:
    """The pipeline timeline of each run, one subplot per run with one row per rank; bubbles are the gaps."""
    ordered = [sorted(run.result.spans, key=lambda s: (s.start, s.rank)) for run in runs]
    window = common_window(ordered, [run.result.makespan_s for run in runs], max_spans)
    drawn = [[s for s in spans if s.start < window] for spans in ordered]
    heights = [ROW_PX * max(1, len(run.result.ranks)) for run in runs]
    plot_px = sum(heights) + GAP_PX * (len(runs) - 1)
    fig = make_subplots(
        rows=len(runs),
        cols=1,
        row_heights=heights,
        shared_xaxes=True,
        vertical_spacing=GAP_PX / plot_px if len(runs) > 1 else 0,
        subplot_titles=[_title(r, d, len(s), window) for r, d, s in zip(runs, drawn, ordered)],
    )
    for row, (run, spans) in enumerate(zip(runs, drawn), start=1):
        ranks = [r.rank for r in run.result.ranks] or [0]
        groups: dict[tuple[int, int, bool, str], list[Span]] = {}
        for span in spans:
            groups.setdefault((span.rank, _kind_order(span.kind), span.request < 0, span.kind), []).append(span)
        for (rank, _, _, kind), mine in sorted(groups.items()):
            fig.add_trace(
                kind_trace(run.name, rank, kind, mine, LABEL_SHARE * window, measured=run.result.measured_timeline),
                row=row,
                col=1,
            )
        fig.update_yaxes(
            tickvals=ranks,
            ticktext=[f"rank {r}" for r in ranks],
            range=[max(ranks) + 0.5, -0.5],
            showgrid=False,
            zeroline=False,
            row=row,
            col=1,
        )
        fig.update_xaxes(showticklabels=True, range=[0, window], row=row, col=1)
        if not spans:
            fig.update_xaxes(visible=False, row=row, col=1)
            fig.update_yaxes(visible=False, row=row, col=1)
            low, high = fig.layout[f"yaxis{row if row > 1 else ''}"].domain
            fig.add_annotation(
                text="no timeline was stored for this run, so there is nothing to draw",
                xref="paper",
                yref="paper",
                x=0.5,
                y=(low + high) / 2,
                showarrow=False,
                font=dict(color="#777"),
            )
    last = max((row for row, spans in enumerate(drawn, start=1) if spans), default=len(runs))
    fig.update_xaxes(title_text="time since the start of the run (s)", row=last, col=1)
    _legend_keys(fig, measured=any(run.result.measured_timeline for run in runs))
    longest = max((run.result.makespan_s for run in runs), default=0.0)
    shown = (
        "whole runs"
        if window >= longest
        else f"0–{window:.4g} s of runs up to {longest:.4g} s long (their first {sum(map(len, drawn))} spans)"
    )
    fig = styled(fig, f"Pipeline timelines, {shown}; gaps are bubbles", plot_px + TOP_PX + BOTTOM_PX, legend_row=True)
    return fig.update_layout(
        barmode="overlay", bargap=0, uniformtext=dict(minsize=9, mode="hide"), margin=dict(b=BOTTOM_PX)
    )


def _kind_order(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)
