"""Snapshots of the console's four views at 100x30, from fixed data (scripted runs and trials, frozen clocks).

After an intended change of a view, look at the new pictures (pytest writes snapshot_report.html) and accept
them with `python -m pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from pipedeck.console.tui import PipedeckApp, tune as tune_view
from pipedeck.backends.registry import BACKENDS, BackendEntry
from pipedeck.store import RunStore
from pipedeck.tuner.study import Progress, TrialSummary, TuneOutcome
from tests.tui_support import QWEN, SIZE, ScriptedBackend, fill, scripted_result, wait_for

FROZEN = datetime(2025, 3, 14, 9, 26, 53)
DB = Path("snap.duckdb")  # relative: the views show it as typed, the same on every machine


@pytest.fixture(autouse=True)
def _fixed_place_and_clock(tmp_path, monkeypatch):
    """Work in a fresh folder, in UTC; offer the scripted backend."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setitem(BACKENDS, "scripted", BackendEntry("scripted", "fixed replay for tests",
                                                           ScriptedBackend.capabilities, ScriptedBackend))
    yield
    monkeypatch.undo()
    time.tzset()


def freeze(table: str, column: str = "created_at") -> None:
    """Give every row of a store table the same time."""
    with RunStore.open(DB) as store:
        store.con.execute(f"UPDATE {table} SET {column} = ?", [FROZEN])


def test_live_view(snap_compare):
    async def run_before(pilot) -> None:  # noqa: ANN001 - a Pilot
        live = pilot.app.screen
        fill(live, {"backend": "scripted", "scenario": "short-4k", "requests": "4", "speed": "max"})
        await pilot.press("s")
        await wait_for(pilot, lambda: live.worker is None and live.stats is not None)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(PipedeckApp(DB, QWEN), terminal_size=SIZE, run_before=run_before)


def test_tune_view(snap_compare, monkeypatch):
    resolved = QWEN.resolve()
    trials = [(0, "COMPLETE", resolved, 7.18), (1, "COMPLETE", resolved.replace(chunk=24576), 10.7),
              (2, "PRUNED", resolved.replace(chunk=40960), None), (3, "COMPLETE", resolved.replace(chunk=16384), 8.02)]

    def study(spec, db, jobs=1, on_progress=None, stop_requested=None):  # noqa: ANN001 - run_study's signature
        with RunStore.open(db) as store:
            store.save_study(spec.study, scenario=spec.scenario, objective=spec.objective, slo={},
                             settings=spec.settings(), storage=spec.storage)
            for number, state, config, value in trials:
                metrics = {"goodput_rps": value, "attainment": 0.9, "ttft_p90_s": 1.8, "tpot_p90_s": 0.12} \
                    if value else {}
                store.save_trial(spec.study, number, state=state, params={"chunk": config.chunk},
                                 config=config.to_dict(), metrics=metrics, objective=value, duration_s=1.0)
        on_progress(Progress(4, spec.trials, 10.7, 1, 0))
        summary = {n: TrialSummary(n, c.to_dict(), {}, v) for n, _, c, v in trials}
        return TuneOutcome(spec.study, "maximize", 4, summary[1], summary[0], None, None, False)

    monkeypatch.setattr(tune_view, "run_study", study)

    async def run_before(pilot) -> None:  # noqa: ANN001 - a Pilot
        await pilot.press("2")
        tune = pilot.app.screen
        fill(tune, {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie", "devices": "4", "requests": "60",
                    "trials": "4"})
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
        store.save_study("qwen-a100-goodput", scenario="azure-conv", objective="goodput",
                         slo={"ttft": {"limit_s": 2.0, "percentile": 90.0}}, settings={}, storage="snap.optuna.jsonl")
    freeze("runs")
    freeze("studies")

    async def run_before(pilot) -> None:  # noqa: ANN001 - a Pilot
        await pilot.press("3")
        runs = pilot.app.screen
        await wait_for(pilot, lambda: runs.query_one("#runs-table").row_count == 2)
        await pilot.press("space", "down", "space")

    assert snap_compare(PipedeckApp(DB), terminal_size=SIZE, run_before=run_before)


def test_config_view(snap_compare):
    async def run_before(pilot) -> None:  # noqa: ANN001 - a Pilot
        await pilot.press("4")
        fill(pilot.app.screen, {"f-tp": "3"})
        await pilot.pause()

    assert snap_compare(PipedeckApp(DB, QWEN), terminal_size=SIZE, run_before=run_before)
