"""What every figure shares: how a run is coloured, and the house layout."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import find_intermediate_color, hex_to_rgb, label_rgb, qualitative

from ...backends import RunResult

RUN_COLOURS: list[str] = qualitative.Plotly  # plotly's default qualitative palette, as hex strings
DASHES = ("solid", "dashdot", "longdashdot", "longdash")  # a config's first run, then the others (not the SLO's dashes)
SHADE_STEP, MAX_SHADE = 0.3, 0.6  # each further run of a config this much nearer black, up to MAX_SHADE
# plotly_white without its per-trace defaults, which every figure would otherwise carry (about 4 kB each)
TEMPLATE = go.layout.Template(layout=pio.templates["plotly_white"].layout)
TOP_PX = 110  # title, a legend row, then subplot titles
FONT = dict(family="Inter, Helvetica, Arial, sans-serif", size=13, color="#222")


@dataclass(frozen=True)
class PlotRun:
    """A run as the figures draw it: its legend name and its result."""

    name: str
    result: RunResult


def wrap(text: str, width: int = 14) -> str:
    """Text broken into lines of about `width` characters, for category tick labels."""
    return "<br>".join(textwrap.wrap(text, width)) or text


def run_colour(index: int) -> str:
    """The colour of the index-th run, the same in every figure of a page."""
    return RUN_COLOURS[index % len(RUN_COLOURS)]


def run_lines(results: Sequence[RunResult]) -> list[dict[str, str]]:
    """Per run, its line's colour and dash, the same in every figure of a page: one hue per config (in page order),
    and each later run of the same config (a study's best at the default's rate) a darker shade of it, dashed."""
    hues: dict[str, int] = {}
    seen: dict[str, int] = {}
    lines = []
    for result in results:
        config = json.dumps(result.config, sort_keys=True, default=str)
        hue = hues.setdefault(config, len(hues))
        nth = seen[config] = seen.get(config, -1) + 1
        shade = find_intermediate_color(hex_to_rgb(run_colour(hue)), (0, 0, 0), min(nth * SHADE_STEP, MAX_SHADE))
        lines.append(dict(color=label_rgb(tuple(round(c) for c in shade)), dash=DASHES[nth % len(DASHES)]))
    return lines


def styled(fig: go.Figure, title: str, height: int, legend_row: bool = False) -> go.Figure:
    """The house style: white template, title top left, fixed height; `legend_row` puts the legend under the title."""
    fig.update_layout(
        template=TEMPLATE,
        font=FONT,
        height=height,
        title=dict(text=title, x=0.01, xanchor="left", yref="container", y=1 - 14 / height, yanchor="top"),
        margin=dict(l=70, r=30, t=TOP_PX if legend_row else 60, b=60),
    )
    if legend_row:
        fig.update_layout(
            legend=dict(orientation="h", x=0, xanchor="left", yref="container", y=1 - 48 / height, yanchor="top")
        )
    return fig
