"""The Runs view: stored runs and studies, filtered; select runs to compare them and write the HTML report."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Button, DataTable, Input, Label, Static

from ...store import RunRow, StudyRow
from ...tuner import open_store
from ..comparison import compare_runs
from ..db import local_time
from ..plots.table import metric_rows, run_cells
from ..run_cells import row_cells
from .compare import CompareScreen, open_report
from .messages import Compared, StoreListed, WorkFailed
from .view import Session, View, cursor_key, one_line, shown_path

# The columns whose headers fit whole at 80 columns, figures first; the run under the cursor's model, time and
# label (free text of any length) go under the table, and also into columns of their own on a wide terminal.
RUN_COLUMNS = ("", "id", "scenario", "config", "TTFT p90", "TPOT p90", "bubble")
RUN_ORDER = (0, 2, 4, 5, 6, 7)  # row_cells (`pipedeck runs` order) -> RUN_COLUMNS after the mark
WIDE_COLUMNS = ("model", "created", "label")
WIDE_ORDER = (3, 1, 8)  # row_cells -> WIDE_COLUMNS
WIDE_FROM = 120  # terminal columns from which the wide columns are shown
NO_DETAIL = "the model, time and label of the run under the cursor show here"
STUDY_COLUMNS = ("trials", "complete", "objective", "scenario", "created", "study")


def matches(words: list[str], cells: Iterable[str]) -> bool:
    """Whether every filter word appears in one of the cells (case-insensitive)."""
    text = " ".join(cells).lower()
    return all(word in text for word in words)


def run_detail(row: RunRow) -> str:
    """What the runs table has no room for: the run's model, when it was stored, its label cell (backend, failed
    requests, label, trial) and its study."""
    _, created, _, model, *_, label = row_cells(row)
    parts = [
        f"run {row.id}: {model or 'model unknown'}",
        f"created {created}",
        label,
        f"study {row.study}" if row.study else "",
    ]
    return ", ".join(part for part in parts if part)


def study_cells(study: StudyRow) -> tuple[str, ...]:
    """A study as text cells: trials, completed trials, objective, scenario, created, name."""
    return (
        str(study.trials),
        str(study.completed),
        study.objective or "",
        study.scenario or "",
        local_time(study.created_at),
        study.name,
    )


class RunsScreen(View):
    """Runs and studies tables under a filter; space selects runs, c compares them, o opens the report."""

    MODE = "runs"
    AUTO_FOCUS = "#runs-table"
    BINDINGS = [
        Binding("space", "select_run", "Select"),
        Binding("c", "compare", "Compare"),
        Binding("o", "open", "Open report"),
        Binding("slash", "filter", "Filter"),
        Binding("r", "reload", "Reload"),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.runs: list[RunRow] = []
        self.studies: list[StudyRow] = []
        self.selected: list[int] = []  # run ids in the order chosen: the first is the baseline
        self.report: Path | None = None
        self.wide = False  # whether the runs table shows WIDE_COLUMNS (set from the terminal's width)

    def body(self) -> ComposeResult:
        with Horizontal(classes="actions", id="runs-top"):
            yield Label("filter")
            yield Input(placeholder="words a run or study must contain", compact=True, id="filter")
            yield Static("", id="runs-count")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True, classes="panel")
        yield Static(Text(NO_DETAIL, style="dim"), id="run-detail")
        yield DataTable(id="studies-table", cursor_type="row", zebra_stripes=True, classes="panel")
        with Horizontal(classes="actions"):
            yield Button("Compare", id="compare", variant="primary", compact=True)
            yield Button("Open report", id="open", compact=True)
            yield Static("select 2+ runs (space or click), then Compare (c)", id="report")

    def on_mount(self) -> None:
        runs, studies = self.query_one("#runs-table", DataTable), self.query_one("#studies-table", DataTable)
        self.wide = self.app.size.width >= WIDE_FROM
        runs.add_columns(*self._run_columns())
        studies.add_columns(*STUDY_COLUMNS)
        runs.border_title = "runs"
        studies.border_title = "studies (enter selects a study's stored runs)"

    def on_screen_resume(self) -> None:
        self.list_store()

    def on_resize(self) -> None:
        """A terminal grown past WIDE_FROM columns shows the model, time and label columns; one shrunk hides them."""
        wide = self.app.size.width >= WIDE_FROM
        if wide != self.wide:
            self.wide = wide
            runs = self.query_one("#runs-table", DataTable)
            runs.clear(columns=True)
            runs.add_columns(*self._run_columns())
            self._fill()

    def _run_columns(self) -> tuple[str, ...]:
        return RUN_COLUMNS + WIDE_COLUMNS if self.wide else RUN_COLUMNS

    def palette_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Compare selected runs", "Metrics side by side and the HTML report", self.action_compare)
        yield SystemCommand("Open comparison report", "Open the last report in a browser", self.action_open)
        yield SystemCommand("Reload runs", "Read the run store again", self.action_reload)

    def on_store_listed(self, message: StoreListed) -> None:
        self.runs, self.studies = message.runs, message.studies
        known = {row.id for row in self.runs}
        self.selected = [i for i in self.selected if i in known]
        self._fill()

    # -- actions ---------------------------------------------------------------------------

    def action_select_run(self) -> None:
        """Select or unselect the run under the cursor."""
        key = cursor_key(self.query_one("#runs-table", DataTable))
        if key is not None:
            self._toggle(int(key))

    def action_compare(self) -> None:
        """Compare the selected runs: metrics with deltas, and the Plotly report written in the working directory."""
        if len(self.selected) < 2:
            self.error("compare: select at least two runs (space or click on a row)")
            return
        self._status("comparing...")
        self._compare(list(self.selected), Path(f"compare-{'-'.join(map(str, self.selected))}.html"))

    def action_open(self) -> None:
        """Open the last comparison report in a browser."""
        if self.report is None:
            self.error("no report yet: compare two or more runs first")
            return
        self._status(open_report(self.report))

    def action_filter(self) -> None:
        """Type a filter."""
        self.query_one("#filter", Input).focus()

    def action_reload(self) -> None:
        """Read the store again."""
        self.list_store()

    @on(DataTable.RowSelected, "#runs-table")
    def _run_clicked(self, event: DataTable.RowSelected) -> None:
        self._toggle(int(str(event.row_key.value)))

    @on(DataTable.RowHighlighted, "#runs-table")
    def _show_detail(self) -> None:
        """Under the table, the model, time and label of the run under its cursor."""
        key = cursor_key(self.query_one("#runs-table", DataTable))
        row = next((r for r in self.runs if str(r.id) == key), None)
        self.query_one("#run-detail", Static).update(Text(run_detail(row)) if row else Text(NO_DETAIL, style="dim"))

    @on(DataTable.RowSelected, "#studies-table")
    def _study_chosen(self, event: DataTable.RowSelected) -> None:
        name = str(event.row_key.value)
        runs = sorted((r for r in self.runs if r.study == name), key=lambda r: (r.label != "default", r.id))
        if not runs:
            self.error(f"study {name} has no stored runs yet (they are stored when it finishes or is stopped)")
            return
        self.selected = [r.id for r in runs]
        self._fill()

    @on(Input.Changed, "#filter")
    def _filtered(self) -> None:
        self._fill()

    @on(Button.Pressed, "#compare")
    def _compare_pressed(self) -> None:
        self.action_compare()

    @on(Button.Pressed, "#open")
    def _open_pressed(self) -> None:
        self.action_open()

    # -- workers and their messages ----------------------------------------------------------

    @work(thread=True, exclusive=True, group="compare")
    def _compare(self, run_ids: list[int], out: Path) -> None:
        """Read the runs with their timelines and write the comparison page (the one `pipedeck compare` writes)."""
        try:
            with open_store(self.session.db) as store:
                stored = [store.get_run(i) for i in run_ids]
            chosen, slo, _ = compare_runs(self.session.db, stored, out)  # a study's best and default: both rates
            cells = run_cells([s.result for s in chosen.stored], slo)
        except Exception as err:  # noqa: BLE001 - store, file and plotting errors are shown, never a crash
            self.post_message(WorkFailed(one_line(err)))
            return
        self.post_message(
            Compared(
                chosen.names,
                chosen.heads,
                [row.label for row in metric_rows(slo)],
                cells,
                out,
                chosen.warnings,
                chosen.notes,
            )
        )

    def on_compared(self, message: Compared) -> None:
        self.report = message.path
        self._status(f"report: {shown_path(message.path)} (o opens it)")
        self.app.push_screen(
            CompareScreen(
                message.names, message.heads, message.rows, message.cells, message.path, message.warnings, message.notes
            )
        )

    def on_work_failed(self, message: WorkFailed) -> None:
        """Say it in the status line too; View's handler (called after this one) shows the error."""
        self._status(f"failed: {message.error}")

    # -- drawing --------------------------------------------------------------------------------

    def _toggle(self, run_id: int) -> None:
        if run_id in self.selected:
            self.selected.remove(run_id)
        else:
            self.selected.append(run_id)
        self._fill()

    def _fill(self) -> None:
        words = self.query_one("#filter", Input).value.lower().split()
        runs = self.query_one("#runs-table", DataTable)
        cursor = runs.cursor_row
        runs.clear()
        shown = 0
        for row in self.runs:
            cells = row_cells(row)
            if matches(words, (*cells, row.study or "")):
                mark = f"✓{self.selected.index(row.id) + 1}" if row.id in self.selected else ""
                order = RUN_ORDER + WIDE_ORDER if self.wide else RUN_ORDER
                runs.add_row(mark, *(cells[i] for i in order), key=str(row.id))
                shown += 1
        runs.move_cursor(row=min(cursor, max(0, shown - 1)))
        self._show_detail()
        studies = self.query_one("#studies-table", DataTable)
        studies.clear()
        for study in self.studies:
            cells = study_cells(study)
            if matches(words, cells):
                studies.add_row(*cells, key=study.name)
        self.query_one("#runs-count", Static).update(f"{shown} of {len(self.runs)} runs, {len(self.selected)} selected")

    def _status(self, text: str) -> None:
        self.query_one("#report", Static).update(Text(text))
