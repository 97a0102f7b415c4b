"""The comparison of selected runs: metrics side by side with deltas against the first, and its HTML report."""

from __future__ import annotations

import textwrap
import webbrowser
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from ..plots.table import DELTAS_NOTE, PLAIN, Cell
from .view import shown_path

MIN_HEAD = 12  # a column's width, at least, for its head to wrap into


def gui_browser() -> webbrowser.BaseBrowser | None:
    """The browser `webbrowser` would open, unless there is none or only one that runs in this terminal."""
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return None
    if isinstance(browser, webbrowser.GenericBrowser) and not isinstance(browser, webbrowser.BackgroundBrowser):
        return None  # lynx, w3m, links ...: they would take over the terminal the console draws on
    return browser


def open_report(path: Path) -> str:
    """Open the report in a browser; what happened, as one line."""
    browser = gui_browser()
    if browser is None:
        return f"no graphical browser found here; open {shown_path(path)} on a machine with one"
    browser.open(path.resolve().as_uri())
    return f"opened {shown_path(path)} in a browser"


class CompareScreen(ModalScreen[None]):
    """Metrics of the selected runs side by side, deltas against the first run of the same scenario and rate;
    above them what makes the runs incomparable (warnings) and how they were chosen (notes)."""

    BINDINGS = [Binding("o", "open", "Open report"), Binding("escape,q", "dismiss", "Close")]

    def __init__(
        self,
        names: list[str],
        heads: list[str],
        rows: list[str],
        cells: list[list[Cell]],
        report: Path,
        warnings: list[str] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        super().__init__()
        self.names, self.heads, self.rows, self.cells, self.report = names, heads, rows, cells, report
        self.warnings, self.notes = warnings or [], notes or []

    def compose(self) -> ComposeResult:
        # a column is headed by its run alone; what tells the runs apart goes above the table, where it wraps
        legends = [Text(name, style="dim") for name, head in zip(self.names, self.heads) if name != head]
        with Vertical(id="compare-panel", classes="panel"):
            if self.warnings or self.notes or legends:
                yield Static(
                    Text("\n").join(
                        [
                            *(Text(f"warning: {w}", style="bold yellow") for w in self.warnings),
                            *(Text(n) for n in self.notes),
                            *legends,
                        ]
                    ),
                    id="compare-notes",
                )
            yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
            yield Static(
                Text(f"report: {shown_path(self.report)}   o opens it in a browser, esc closes"), id="compare-report"
            )
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#compare-panel").border_title = f"comparison ({DELTAS_NOTE})"
        table = self.query_one(DataTable)
        # a head longer than its column's figures (a long label) wraps over the header's lines, never widening the
        # table past the edge, where a header would be cut
        heads = [
            textwrap.wrap(head, max(MIN_HEAD, *(len(cell.text) for cell in column)))
            for head, column in zip(self.heads, self.cells)
        ]
        table.header_height = max((len(lines) for lines in heads), default=1)
        table.add_columns("metric", *(Text("\n".join(lines)) for lines in heads))
        for index, label in enumerate(self.rows):
            table.add_row(
                label,
                *(
                    Text(column[index].text, style="" if column[index].colour == PLAIN else column[index].colour)
                    for column in self.cells
                ),
            )

    def action_open(self) -> None:
        """Open the HTML report in a graphical browser, or say there is none."""
        self.query_one("#compare-report", Static).update(Text(open_report(self.report)))
