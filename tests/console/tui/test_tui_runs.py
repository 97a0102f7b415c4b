"""The console's Runs view: stored runs listed and filtered, two compared side by side, the report written."""

from __future__ import annotations

import asyncio
import re
import webbrowser

from textual.widgets import DataTable, Static

from pipedeck.backends.sim import SimBackend
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.compare import CompareScreen
from pipedeck.console.tui.runs import RUN_COLUMNS, WIDE_COLUMNS, WIDE_FROM
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore
from tests.run_kinds import store_awkward_runs
from tests.tui_support import QWEN, SIZE, fill, store_runs, wait_for


def test_two_stored_runs_compare_with_deltas_and_a_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(webbrowser, "get", lambda: (_ for _ in ()).throw(webbrowser.Error("no browser")))
    db = tmp_path / "c.duckdb"
    cpp, vpp = store_runs(db, labels=(None, "tp · pp"))  # a label with the legends' separator in it

    async def scenario() -> None:
        app = PipedeckApp(db)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("3")
            runs = app.screen
            table = runs.query_one("#runs-table", DataTable)
            await wait_for(pilot, lambda: table.row_count == 2)
            fill(runs, {"filter": "vpp"})
            await wait_for(pilot, lambda: table.row_count == 1)
            fill(runs, {"filter": ""})
            await wait_for(pilot, lambda: table.row_count == 2)
            await pilot.press("space", "down", "space")
            assert runs.selected == [vpp, cpp]
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.query(DataTable))
            compare = app.screen
            rows = compare.query_one(DataTable)
            # columns are headed by their run and its whole label; above the table, what differs between them (no
            # warning: the same scenario, model, hardware and rate)
            assert rows.row_count >= 18 and [str(c.label) for c in rows.columns.values()][1:] == [
                f"run {vpp} tp · pp",
                f"run {cpp}",
            ]
            notes = str(compare.query_one("#compare-notes", Static).render())
            assert notes.splitlines() == [
                f"run {vpp} tp · pp · vpp · split 12,12,12,12",
                f"run {cpp} · cpp · split 24,24",
            ]
            throughput = next(compare.cells[1][i] for i, label in enumerate(compare.rows) if "throughput" in label)
            assert re.search(r"\([+-][\d.]+%, (better|worse)\)", throughput.text)  # a delta against the first run
            await pilot.press("o")
            assert "no graphical browser" in str(compare.query_one("#compare-report", Static).content)
            await pilot.press("escape")
            assert app.screen is runs

    asyncio.run(scenario())
    report = tmp_path / f"compare-{vpp}-{cpp}.html"
    assert report.is_file() and "plotly" in report.read_text(encoding="utf-8")[:200000].lower()


def test_runs_of_different_scenarios_compare_with_a_warning(tmp_path, monkeypatch):
    """The console does not compare azure-conv with long-64k without a word: the dialog says they differ."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "c.duckdb"
    cpp, _ = store_runs(db)
    with RunStore.open(db) as store:
        other = store.save_run(SimBackend().run(load_scenario("short-8k"), QWEN, num_requests=4))

    async def scenario() -> None:
        app = PipedeckApp(db)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("3")
            runs = app.screen
            await wait_for(pilot, lambda: runs.query_one("#runs-table", DataTable).row_count == 3)
            runs.selected = [cpp, other]
            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.query("#compare-notes"))
            notes = str(app.screen.query_one("#compare-notes", Static).render())
            assert f"warning: the runs differ in scenario (run {cpp}: short-4k; run {other}: short-8k)" in notes

    asyncio.run(scenario())


def test_the_console_starts_on_a_store_of_every_kind_of_run(tmp_path, monkeypatch):
    """A stored run with no TTFT, one request or no TPOT: the console starts and its Runs view lists them all."""
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "kinds.duckdb"
    ids = store_awkward_runs(db)

    async def scenario() -> None:
        app = PipedeckApp(db)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("3")
            runs = app.screen
            table = runs.query_one("#runs-table", DataTable)
            await wait_for(pilot, lambda: table.row_count == len(ids))
            failed = table.get_row(str(ids["all-failed"]))
            assert failed[RUN_COLUMNS.index("TTFT p90")] == failed[RUN_COLUMNS.index("TPOT p90")] == "n/a"
            table.move_cursor(row=table.get_row_index(str(ids["all-failed"])))
            await pilot.pause()
            assert "3 failed" in str(runs.query_one("#run-detail", Static).render())
            assert app.is_running

    asyncio.run(scenario())


def test_a_wide_terminal_shows_the_model_time_and_label_columns_and_a_narrow_one_hides_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "kinds.duckdb"
    ids = store_awkward_runs(db)

    async def scenario() -> None:
        app = PipedeckApp(db)
        async with app.run_test(size=(WIDE_FROM, 30)) as pilot:
            await pilot.press("3")
            table = app.screen.query_one("#runs-table", DataTable)
            await wait_for(pilot, lambda: table.row_count == len(ids))
            headers = [str(column.label) for column in table.columns.values()]
            assert headers == [*RUN_COLUMNS, *WIDE_COLUMNS]
            assert "3 failed" in table.get_row(str(ids["all-failed"]))[headers.index("label")]
            await pilot.resize_terminal(80, 24)
            await wait_for(pilot, lambda: len(table.columns) == len(RUN_COLUMNS))
            assert table.row_count == len(ids) and len(table.get_row(str(ids["all-failed"]))) == len(RUN_COLUMNS)

    asyncio.run(scenario())
