"""Sim-screened, live-confirmed tuning and live tuning against a real llama-server serving the tiny model.

`tune --confirm live --launch llama-server` tunes on the simulator, then
measures the top configs and the default, each on a server launched for it;
`tune --backend live --launch llama-server` runs every trial on a server of
its own. Both are checked for their rows, their stored runs, a server that
fails health failing only its row or trial with one line, and no server left
running. The SLO is loose and the workload short, so each goodput search ends
at the workload's ceiling after one run (a few seconds per config).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from pipedeck.backends import LaunchError, ServingConfig, make_backend
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore
from tests.live.test_console_launch import processes_serving
from tests.live.test_live_llama import CPU

TINY = str(Path(__file__).parents[1] / "data" / "tiny-chat.toml")
TUNE = [
    "tune",
    "--model",
    "qwen2.5-14b",
    "--hardware",
    "a100-40g-pcie",
    "--scenario",
    TINY,
    "--requests",
    "12",
    "--slo",
    "ttft=2s,tpot=200ms",
    "--fix",
    "tp=1",
    "--fix",
    "pp=1",
    "--fix",
    "max-running=4",
    "--fix",
    "kv-capacity=8192",
]


def launch(binary: Path, model: Path) -> list[str]:
    return ["--launch", "llama-server", "--program", str(binary), "--model-path", str(model)]


def tune_json(capsys, argv: list[str]) -> dict:
    status = run_cli(cli, [*argv, "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)


@pytest.fixture()
def refuses_once(llama_server_binary, tmp_path) -> Path:
    """A llama-server launcher that exits at once the first time it is started (a server failing health)."""
    script = tmp_path / "refuses-once.sh"
    marker = tmp_path / "refused"
    script.write_text(
        f'#!/bin/sh\nif [ ! -e "{marker}" ]; then touch "{marker}"; echo "refusing this launch"; '
        f'exit 3; fi\nexec "{llama_server_binary}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def test_confirm_live_measures_the_top_configs_and_the_default_each_on_its_own_server(
    llama_server_binary, tiny_model, tmp_path, capsys
):
    db = tmp_path / "r.duckdb"
    out = tune_json(
        capsys, [*TUNE, "--trials", "4", "--db", str(db), "--confirm", "live", *launch(llama_server_binary, tiny_model)]
    )
    rows = out["confirm"]
    assert rows[0]["role"].startswith("top 1") and sum("default" in r["role"] for r in rows) == 1
    assert all(r["error"] is None and r["measured"] > 0 and r["simulated"] > 0 for r in rows)
    assert {r["config"]["chunk"] for r in rows} and all(r["config"]["max_running"] == 4 for r in rows)
    with RunStore.open(db, read_only=True) as store:
        runs = {r.id: r for r in store.list_runs(study=out["study"])}
        live = store.get_run(rows[0]["run_id"]).result
    for row in rows:
        stored = runs[row["run_id"]]
        assert (stored.label, stored.backend, stored.trial, stored.requests) == ("confirm", "live", row["trial"], 12)
        assert stored.rate == pytest.approx(row["measured"])
    assert live.live.engine_version.startswith("llama.cpp") and not live.live.failed()
    assert len(list((tmp_path / "r-servers").iterdir())) == len(rows)
    assert processes_serving(tiny_model) == []


def test_a_server_failing_health_fails_only_its_confirm_row(refuses_once, tiny_model, tmp_path, capsys):
    out = tune_json(
        capsys,
        [
            *TUNE,
            "--trials",
            "3",
            "--confirm-top",
            "2",
            "--db",
            str(tmp_path / "r.duckdb"),
            "--confirm",
            "live",
            *launch(refuses_once, tiny_model),
        ],
    )
    first, *rest = out["confirm"]
    assert first["measured"] is None and first["run_id"] is None and "\n" not in first["error"]
    assert first["error"].startswith("engine: llama-server exited with status 3 before it was healthy; log: ")
    assert first["error"].endswith("(last line: refusing this launch)")
    assert rest and all(r["error"] is None and r["measured"] > 0 for r in rest)
    assert processes_serving(tiny_model) == []


def test_the_text_summary_puts_simulated_and_measured_side_by_side(llama_server_binary, tiny_model, tmp_path, capsys):
    argv = [
        *TUNE,
        "--trials",
        "2",
        "--confirm-top",
        "1",
        "--db",
        str(tmp_path / "r.duckdb"),
        "--confirm",
        "live",
        *launch(llama_server_binary, tiny_model),
    ]
    assert run_cli(cli, argv) == 0
    text = capsys.readouterr().out
    assert "simulated vs measured goodput on llama-server launched per config" in text
    assert "rank sim" in text and "stored live runs:" in text


def test_a_live_tune_runs_each_trial_on_a_fresh_llama_server(refuses_once, tiny_model, tmp_path, capsys):
    db = tmp_path / "r.duckdb"
    out = tune_json(
        capsys, [*TUNE, "--trials", "3", "--db", str(db), "--backend", "live", *launch(refuses_once, tiny_model)]
    )
    (failed,) = out["server_errors"]
    assert failed["trial"] == 0 and failed["error"].endswith("(last line: refusing this launch)")
    assert out["trials"] == 3 and out["best"]["goodput_rps"] > 0
    with RunStore.open(db, read_only=True) as store:
        best = store.get_run(out["best_run_id"])
        trials = {t.number: t.state for t in store.trials(out["study"])}
    assert best.result.backend == "live" and best.label == "best" and best.result.config == out["best"]["config"]
    assert trials == {0: "PRUNED", 1: "COMPLETE", 2: "COMPLETE"}
    assert processes_serving(tiny_model) == []


def test_a_server_killed_mid_run_fails_that_run_and_the_next_gets_a_fresh_one(
    llama_server_binary, tiny_model, tmp_path
):
    with make_backend(
        "live",
        launch="llama-server",
        model_path=str(tiny_model),
        program=str(llama_server_binary),
        log_dir=str(tmp_path / "logs"),
        health_timeout_s=30,
        stall_s=5.0,
    ) as backend:
        backend.run(load_scenario(TINY), ServingConfig.of(**CPU), rate=20, num_requests=4)
        pid = backend.server.process.pid
        threading.Timer(1.0, lambda: os.kill(pid, signal.SIGKILL)).start()
        with pytest.raises(LaunchError, match=r"^engine: llama-server exited with status -9 while serving; log: "):
            backend.run(load_scenario("cnn-reversed"), ServingConfig.of(**CPU), rate=20.0, num_requests=40)
        result = backend.run(load_scenario(TINY), ServingConfig.of(**CPU), rate=20, num_requests=4)
        assert len(result.records) == 4 and backend.starts == 2
    assert processes_serving(tiny_model) == []
