"""The console's Runs view: stored runs listed and filtered, two compared side by side, the report written."""

from __future__ import annotations

import asyncio
import webbrowser

from textual.widgets import DataTable, Static

from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.compare import CompareScreen
from tests.tui_support import SIZE, fill, store_runs, wait_for


def test_two_stored_runs_compare_with_deltas_and_a_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(webbrowser, "get", lambda: (_ for _ in ()).throw(webbrowser.Error("no browser")))
    db = tmp_path / "c.duckdb"
    cpp, vpp = store_runs(db)

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
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen))
            compare = app.screen
            rows = compare.query_one(DataTable)
            assert rows.row_count >= 18 and [str(c.label) for c in rows.columns.values()][1:] == \
                [f"run {vpp} vpp", f"run {cpp} cpp"]
            throughput = next(compare.cells[1][i] for i, label in enumerate(compare.rows) if "throughput" in label)
            assert "%)" in throughput.text  # a delta against the first run
            await pilot.press("o")
            assert "no graphical browser" in str(compare.query_one("#compare-report", Static).content)
            await pilot.press("escape")
            assert app.screen is runs

    asyncio.run(scenario())
    report = tmp_path / f"compare-{vpp}-{cpp}.html"
    assert report.is_file() and "plotly" in report.read_text(encoding="utf-8")[:200000].lower()
