"""The Tune view's chart: the objective of each trial as a bar, pruned and failed trials as a dot, the best in green."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

EIGHTHS = " ▁▂▃▄▅▆▇█"


class TrialChart(Widget):
    """Bars of the objective by trial number (the latest trials when they do not all fit)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._points: list[tuple[int, float | None]] = []
        self._best: int | None = None

    def show(self, points: Sequence[tuple[int, float | None]], best: int | None) -> None:
        """Draw (trial number, objective or None) points and mark trial `best`."""
        self._points, self._best = list(points), best
        self.refresh()

    def render(self) -> RenderResult:
        values = [v for _, v in self._points if v is not None]
        top = max(values, default=0.0) or 1.0
        labels = (f"{top:.3g}", "0")
        axis = max(map(len, labels)) + 2  # "10.7 ┤"
        width, height = self.size.width - axis, self.size.height - 1
        if not self._points or width < 1 or height < 1:
            return Text("no finished trial yet", style="dim")
        gap = 1 if 2 * len(self._points) <= width else 0
        points = self._points[-(width // (1 + gap)) :]
        text = Text(no_wrap=True)
        for row in range(height, 0, -1):
            label = labels[0] if row == height else labels[1] if row == 1 else ""
            text.append(f"{label:>{axis - 2}} ┤", style="dim")
            for number, value in points:
                text.append(self._cell(value, row, top, height), style=self._style(number, value))
                text.append(" " * gap)
            text.append("\n")
        first, last = str(points[0][0]), str(points[-1][0])
        numbers = first + last.rjust(max(len(last), len(points) * (1 + gap) - gap - len(first)))
        text.append(" " * axis + numbers, style="dim")
        return text

    def _cell(self, value: float | None, row: int, top: float, height: int) -> str:
        if value is None:
            return "·" if row == 1 else " "
        level = round(value / top * height * 8) - (row - 1) * 8
        if row == 1 and value > 0:
            level = max(level, 1)
        return EIGHTHS[max(0, min(8, level))]

    def _style(self, number: int, value: float | None) -> str:
        if value is None:
            return "dim"
        return "bold green" if number == self._best else "cyan"
