"""The Live view's pipeline strip: each rank's last seconds of timeline, one character cell per slice of time."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from rich.text import Text
from textual.app import RenderResult
from textual.color import Color
from textual.geometry import Size
from textual.widget import Widget

from ....backends import TRANSFER_KINDS, Span

REQUEST_COLOURS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#86bcb6",
    "#d4a6c8",
    "#8cd17d",
)
DECODE_COLOUR = "#7f7f7f"
MEASURED_COLOUR = "#8fb3d9"  # a measured prefill or mixed step: the engine's profiler names no request
BLACK = Color(0, 0, 0)
TALL_RANKS = 4  # up to this many ranks get two lines each on a terminal of TALL_SCREEN lines or more
TALL_SCREEN = 30
STAGE_GLYPHS = "0123456789abcdefghijklmnopqrstuvwxyz"
LABEL_WIDTH = 4  # "r0  "
RATIO_WIDTH = 5  # " 12%"


def span_cells(spans: Iterable[Span], start: float, end: float, width: int) -> list[Span | None]:
    """The span drawn in each of `width` cells over [start, end): the one covering most of it; None under half busy."""
    step = (end - start) / width
    best: list[Span | None] = [None] * width
    longest = [0.0] * width
    covered = [0.0] * width
    for span in spans:
        lo, hi = max(span.start, start), min(span.end, end)
        if hi <= lo:
            continue
        for cell in range(int((lo - start) / step), min(width, math.ceil((hi - start) / step))):
            left = start + cell * step
            overlap = min(hi, left + step) - max(lo, left)
            if overlap <= 0:
                continue
            covered[cell] += overlap
            if overlap > longest[cell]:
                longest[cell], best[cell] = overlap, span
    return [span if cover >= step / 2 else None for span, cover in zip(best, covered)]


def bubble_ratios(spans_by_rank: Sequence[Sequence[Span]], start: float, end: float) -> list[float]:
    """Per rank, the share of the window's busy time (some rank working) that the rank sat idle."""
    clipped = [
        [(max(s.start, start), min(s.end, end)) for s in spans if s.end > start and s.start < end]
        for spans in spans_by_rank
    ]
    active = _union_length([iv for rank in clipped for iv in rank])
    if active <= 0:
        return [0.0] * len(spans_by_rank)
    return [max(0.0, 1.0 - _union_length(rank) / active) for rank in clipped]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for lo, hi in sorted(intervals):
        if hi <= reach:
            continue
        total += hi - max(lo, reach)
        reach = hi
    return total


def span_style(span: Span) -> tuple[str, str]:
    """A span's glyph and style: its stage digit on its request's colour (odd chunks darker; decode-only grey, a
    measured step that names no request its own colour); transfers a rule."""
    if span.kind in TRANSFER_KINDS:
        return "─", DECODE_COLOUR
    if span.request >= 0:
        colour = REQUEST_COLOURS[span.request % len(REQUEST_COLOURS)]
    else:
        colour = DECODE_COLOUR if span.kind == "decode" else MEASURED_COLOUR
    if span.chunk % 2:
        colour = Color.parse(colour).blend(BLACK, 0.3).hex
    return STAGE_GLYPHS[span.stage % len(STAGE_GLYPHS)], f"bold #000000 on {colour}"


class PipelineStrip(Widget):
    """One row per rank: coloured blocks per request and virtual stage, bubbles blank, each rank's bubble share."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._view: tuple[float, float, list[list[Span]]] = (0.0, 0.0, [])
        self.placeholder = "no timeline yet: start a run"  # what an empty strip says

    def show(self, start: float, end: float, spans_by_rank: list[list[Span]]) -> None:
        """Draw the spans over [start, end)."""
        resized = len(spans_by_rank) != len(self._view[2])
        self._view = (start, end, spans_by_rank)
        self.refresh(layout=resized)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        ranks = max(1, len(self._view[2]))
        return ranks * self._rows_per_rank(ranks, viewport.height)

    @staticmethod
    def _rows_per_rank(ranks: int, screen_height: int) -> int:
        return 2 if ranks <= TALL_RANKS and screen_height >= TALL_SCREEN else 1

    def render(self) -> RenderResult:
        start, end, spans_by_rank = self._view
        width = self.size.width - LABEL_WIDTH - RATIO_WIDTH
        if not spans_by_rank or width < 1 or end <= start:
            return Text(self.placeholder, style="dim")
        rows = self._rows_per_rank(len(spans_by_rank), self.app.size.height)
        lines = []
        for rank, (spans, ratio) in enumerate(zip(spans_by_rank, bubble_ratios(spans_by_rank, start, end))):
            cells = Text(no_wrap=True)
            for span in span_cells(spans, start, end, width):
                glyph, style = span_style(span) if span is not None else (" ", "")
                cells.append(glyph, style=style)
            label = Text(f"r{rank:<{LABEL_WIDTH - 1}}", style="bold")
            lines.append(label + cells + Text(f"{ratio:>{RATIO_WIDTH}.0%}"))
            lines += [Text(" " * LABEL_WIDTH) + cells] * (rows - 1)
        return Text("\n").join(lines)
