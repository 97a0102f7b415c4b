"""The console's Tune view: a study runs in a worker, fills the trials table, pauses, resumes and exports."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
import threading

from textual.widgets import DataTable, Static

from pipedeck.backends import ENGINES
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.tune import TuneScreen, best_text, trial_cells, trial_detail
from pipedeck.store import RunStore, TrialRow
from pipedeck.tuner import GOODPUT, run_study
from pipedeck.tuner.objectives import TTFT
from tests.tui_support import SIZE, fill, notifications, wait_for

SMALL_STUDY = {
    "scenario": "azure-conv",
    "requests": "60",
    "model": "qwen2.5-14b",
    "hardware": "a100-40g-pcie",
    "devices": "4",
    "slo": "ttft=2s,tpot=200ms",
    "trials": "5",
}


async def open_tune(pilot) -> TuneScreen:
    await pilot.press("2")
    tune = pilot.app.screen
    assert isinstance(tune, TuneScreen)
    fill(tune, SMALL_STUDY)
    return tune


def test_trial_rows_show_the_shape_in_columns_and_the_split_and_other_knobs_by_their_fix_names_under_them():
    params = {
        "tp": 2,
        "pp": 2,
        "mode": "dcpp",
        "chunk": 4096,
        "layer-split": "25,23",
        "smooth-factor": 0.51234,
        "delay-scheduling": False,
    }
    ran = TrialRow(
        "st",
        3,
        "COMPLETE",
        params,
        {"tp": 2, "pp": 2, "mode": "dcpp", "chunk": 4096, "layer_split": [25, 23]},
        {},
        12.5,
        1.0,
        None,
        None,
    )
    unrun = TrialRow("st", 4, "PRUNED", params, None, {}, None, 0.1, None, None)  # its config could not run
    assert trial_cells(ran, GOODPUT) == ("3", "done", "12.5", "2×2", "4k", "dcpp")  # req/s heads the column
    assert trial_cells(unrun, GOODPUT)[1:] == ("pruned", "-", "2×2", "4k", "dcpp")
    assert trial_detail(ran) == "trial 3: split 25,23 smooth-factor=0.5123 delay-scheduling=off"
    assert trial_detail(unrun) == "trial 4: split 25,23 smooth-factor=0.5123 delay-scheduling=off"


def test_a_five_trial_study_fills_the_table_and_the_best_config_exports(tmp_path):
    db, out = tmp_path / "c.duckdb", tmp_path / "deploy"

    async def scenario() -> None:
        app = PipedeckApp(db)
        async with app.run_test(size=SIZE) as pilot:
            tune = await open_tune(pilot)
            await pilot.press("s")
            await wait_for(pilot, lambda: tune.phase == "idle", timeout=60)
            assert tune.query_one(DataTable).row_count == 5
            best = str(tune.query_one("#best", Static).content)
            assert "req/s" in best and "the default config" in best
            assert "finished: 5 trials; stored runs best" in str(tune.query_one("#tune-status", Static).content)
            mode = tune.trials[tune.best].config["mode"]
            engines = [name for name, engine in ENGINES.items() if mode in engine.modes]
            fill(tune, {"out": str(out), "engine": engines[0] if engines else "vllm"})
            await pilot.press("e")
            refused = lambda: [m for sev, m in notifications(app) if sev == "error" and m.startswith("format: ")]  # noqa: E731
            await wait_for(pilot, lambda: "wrote" in str(tune.query_one("#export-status", Static).content) or refused())
            # a config no engine runs (a mode, or delay scheduling, it lacks) is refused with the reason, as
            # `pipedeck export` refuses it
            assert out.exists() != bool(refused()) and all("\n" not in m for m in refused())

    asyncio.run(scenario())
    if out.exists():
        assert {p.name for p in out.iterdir()} >= {"serve.sh", "pipedeck-best.json"}
    with RunStore.open(db, read_only=True) as store:
        (study,) = store.list_studies()
        assert study.completed + sum(t.state == "PRUNED" for t in store.trials(study.name)) == 5
        assert {row.label for row in store.list_runs(study=study.name)} <= {"best", "default"}


def test_keys_are_answered_while_a_study_runs_and_pause_resumes_the_same_study(tmp_path):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        app = PipedeckApp(db)
        async with app.run_test(size=SIZE) as pilot:
            tune = await open_tune(pilot)
            fill(tune, {"trials": "500"})  # still running after the resume, however fast trials are
            app.simulate_key("s")
            await wait_for(pilot, lambda: tune.phase == "running")
            for key, mode in (("1", "live"), ("2", "tune")):  # answered at once, though the tuner keeps a core busy
                app.simulate_key(key)
                await pilot.pause()  # one turn of the event loop: the key's messages handled, no waiting on the tuner
                assert app.current_mode == mode and tune.phase == "running"
            app.simulate_key("p")
            await wait_for(pilot, lambda: tune.phase == "paused")
            study, paused_at = tune.spec.study, tune.finished
            assert str(tune.query_one("#start").label) == "Resume"
            app.simulate_key("s")
            await wait_for(pilot, lambda: tune.phase == "running" and tune.finished > paused_at)  # the study goes on
            assert tune.spec.study == study
            app.simulate_key("p")
            await wait_for(pilot, lambda: tune.phase == "paused")
            app.simulate_key("x")  # stopping a paused study ends it: best and default measured and stored
            await wait_for(pilot, lambda: tune.phase == "idle")
            assert "finished" in str(tune.query_one("#tune-status", Static).content)

    asyncio.run(scenario())
    with RunStore.open(db, read_only=True) as store:
        (study,) = store.list_studies()
        numbers = [t.number for t in store.trials(study.name)]
        assert len(numbers) == len(set(numbers)) and study.completed >= 1
        assert "best" in {row.label for row in store.list_runs(study=study.name)}


def test_a_bad_setting_is_refused_and_its_field_marked(tmp_path):
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb")
        async with app.run_test(size=SIZE) as pilot:
            tune = await open_tune(pilot)
            fill(tune, {"fix": "tp=3"})
            await pilot.press("s")
            assert tune.phase == "idle" and tune.query_one("#fix").has_class("-invalid")
            assert ("error", "tp: must divide the 4 devices, got 3") in notifications(app)
            fill(tune, {"fix": "", "scenario": "long-64k"})
            await pilot.press("s")
            assert tune.query_one("#scenario").has_class("-invalid") and tune.phase == "idle"

    asyncio.run(scenario())


def test_quitting_during_a_study_stops_it_quietly_and_it_resumes(tmp_path, capfd):
    db = tmp_path / "c.duckdb"
    optuna_log, level = logging.StreamHandler(sys.stderr), logging.getLogger("optuna").level
    logging.getLogger("optuna").addHandler(optuna_log)  # Optuna's log as a terminal shows it (the console drops it)
    logging.getLogger("optuna").setLevel(logging.INFO)
    spec = None

    async def scenario() -> None:
        nonlocal spec
        app = PipedeckApp(db)
        async with app.run_test(size=SIZE) as pilot:
            tune = await open_tune(pilot)
            fill(tune, {"trials": "500"})
            await pilot.press("s")
            await wait_for(pilot, lambda: tune.finished >= 1, timeout=60)  # and the next trial under way
            spec = tune.spec
            await pilot.press("ctrl+q")

    try:
        asyncio.run(scenario())  # returns once the study's thread has finished, as `pipedeck console` exits
    finally:
        logging.getLogger("optuna").removeHandler(optuna_log)
        logging.getLogger("optuna").setLevel(level)
    assert not [t.name for t in threading.enumerate() if "_worker" in t.name]  # no study.optimize left running
    err = capfd.readouterr().err
    assert "Traceback" not in err and "failed" not in err, err
    with RunStore.open(db, read_only=True) as store:
        before = store.trials(spec.study)
    assert before and not [t for t in before if t.state == "RUNNING"]
    outcome = run_study(dataclasses.replace(spec, trials=len(before) + 1), db)  # resumes: one more trial
    with RunStore.open(db, read_only=True) as store:
        numbers = [t.number for t in store.trials(spec.study)]
    assert not outcome.interrupted and outcome.trials >= len(before) + 1 and len(numbers) == len(set(numbers))


def test_the_best_panel_words_the_gain_over_the_default_in_the_objective_s_direction():
    """A TTFT study's best is lower, not '1.33x the default'; a goodput study's is higher (as tune prints them)."""
    trial = TrialRow(
        study="s",
        number=3,
        state="COMPLETE",
        params={},
        config={"mode": "cpp", "tp": 2, "pp": 2, "chunk": 2048, "layer_split": [24, 24]},
        metrics={},
        objective=1.5,
        duration_s=1.0,
        completed_at=None,
        run_id=None,
    )
    assert "1.33x lower mean TTFT than the default config" in best_text(trial, TTFT, 1.33).plain
    assert "1.33x higher goodput than the default config" in best_text(trial, GOODPUT, 1.33).plain
