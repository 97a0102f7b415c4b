"""Snapshots of the console's four views at 100x30, from fixed data (scripted runs and trials, frozen clocks).

After an intended change of a view, look at the new pictures (pytest writes snapshot_report.html) and accept
them with `python -m pytest tests/console/tui/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from pipedeck.backends import backends
from pipedeck.backends.base import BackendDeclaration
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui import tune as tune_view
from pipedeck.store import RunStore
from tests.tui_support import QWEN, SIZE, ScriptedBackend, fake_study, fill, scripted_result, wait_for

FROZEN = datetime(2025, 3, 14, 9, 26, 53)
DB = Path("snap.duckdb")  # relative: the views show it as typed, the same on every machine


@pytest.fixture(autouse=True)
def _fixed_place_and_clock(tmp_path, monkeypatch):
    """Work in a fresh folder, in UTC; offer the scripted backend."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setitem(
        backends(),
        "scripted",
        BackendDeclaration("scripted", "fixed replay for tests", ScriptedBackend.capabilities, ScriptedBackend),
    )
    yield
    monkeypatch.undo()
    time.tzset()


def freeze(table: str, column: str = "created_at") -> None:
    """Give every row of a store table the same time."""
    with RunStore.open(DB) as store:
        store.con.execute(f"UPDATE {table} SET {column} = ?", [FROZEN])


def test_live_view(snap_compare):
    async def run_before(pilot) -> None:
        live = pilot.app.screen
        fill(live, {"backend": "scripted", "scenario": "short-4k", "requests": "4", "speed": "max"})
        await pilot.press("s")
        await wait_for(pilot, lambda: live.worker is None and live.stats is not None)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(PipedeckApp(DB, QWEN), terminal_size=SIZE, run_before=run_before)


def test_tune_view(snap_compare, monkeypatch):
    monkeypatch.setattr(tune_view, "run_study", fake_study)

    async def run_before(pilot) -> None:
        await pilot.press("2")
        tune = pilot.app.screen
        fill(
            tune, {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie", "devices": "4", "requests": "60", "trials": "4"}
        )
        await pilot.press("s")
        await wait_for(pilot, lambda: tune.phase == "idle" and tune.trials)
        await pilot.press("e")
        await wait_for(pilot, lambda: "wrote" in str(tune.query_one("#export-status").content))
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(PipedeckApp(DB), terminal_size=SIZE, run_before=run_before)


def test_runs_view(snap_compare):
    with RunStore.open(DB) as store:
        for mode, chunk_s in (("cpp", 0.3), ("vpp", 0.25)):
            store.save_run(scripted_result(QWEN.replace(mode=mode).resolve().to_dict(), chunk_s), label=mode)
        store.save_study(
            "qwen-a100-goodput",
            scenario="azure-conv",
            objective="goodput",
            slo={"ttft": {"limit_s": 2.0, "percentile": 90.0}},
            settings={},
            storage="snap.optuna.jsonl",
        )
    freeze("runs")
    freeze("studies")

    async def run_before(pilot) -> None:
        await pilot.press("3")
        runs = pilot.app.screen
        await wait_for(pilot, lambda: runs.query_one("#runs-table").row_count == 2)
        await pilot.press("space", "down", "space")

    assert snap_compare(PipedeckApp(DB), terminal_size=SIZE, run_before=run_before)


def test_config_view(snap_compare):
    async def run_before(pilot) -> None:
        await pilot.press("4")
        fill(pilot.app.screen, {"f-tp": "3"})
        await pilot.pause()

    assert snap_compare(PipedeckApp(DB, QWEN), terminal_size=SIZE, run_before=run_before)
