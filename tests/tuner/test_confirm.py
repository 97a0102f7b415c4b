"""Sim-screened, live-confirmed tuning and live tuning on a fake engine: confirm rows, live trials, tune's options.

The fake engine (tests/data/fake_engine.py with FAKE_ENGINE=serve) takes any
engine's flags, answers /health and streams completions as the mock server
does, so every path of `tune --confirm live` and `tune --backend live` runs
here in seconds; tests/live/test_tune_live.py runs the same against a real
llama-server.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from pipedeck.backends import RequestRecord, RunResult
from pipedeck.backends.live_result import LiveRequest, LiveRun
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import GOODPUT, ConfirmRow, TuneSpec, parse_slo, ranks
from pipedeck.tuner.confirm import candidates
from pipedeck.tuner.objectives import TTFT
from tests.paths import DATA

FAKE = f"{sys.executable} {DATA / 'fake_engine.py'}"
TINY = str(DATA / "tiny-chat.toml")
CPU = dict(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=1, chunk=512, max_running=4, kv_capacity=4096)
PINS = ["--fix", "tp=1", "--fix", "pp=1", "--fix", "max-running=4", "--fix", "kv-capacity=4096"]
UNPINNED = [
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
]
TUNE = [*UNPINNED, *PINS]


def processes_serving(model: Path) -> list[int]:
    """PIDs of fake engines serving `model`: `python .../fake_engine.py --model MODEL ...` (not the tune naming them)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if len(words) > 1 and words[1].endswith(b"fake_engine.py") and str(model).encode() in words:
            pids.append(int(entry.name))
    return pids


def test_a_failed_live_request_misses_every_limit():
    served = [RequestRecord(i, 0.0, 10, 5, 0.1, 0.2) for i in range(9)]
    requests = [LiveRequest(r.id, 0.0, 0.0, 0.1, 0.2, 10, 5, 5, "usage", ()) for r in served]
    requests.append(LiveRequest(9, 0.0, 0.0, None, 0.1, 10, 5, 0, "events", (), error="connect: refused"))
    result = RunResult(
        config={},
        scenario="s",
        backend="live",
        seed=0,
        rate=1.0,
        records=served,
        ranks=[],
        makespan_s=1.0,
        steps=None,
        chunks=None,
        stage_executions=None,
        live=LiveRun(requests=requests, unsent=0, loadgen_cpu_s=0.0),
    )
    assert not parse_slo("ttft=1s").met(result)  # its P90 falls on the failed request
    assert parse_slo("ttft@p50=1s").met(result)
    assert parse_slo("ttft=1s").attainment(result) == pytest.approx(0.9)


def test_a_study_keeps_the_engine_and_weights_it_was_measured_with_not_the_endpoint_or_program():
    base = dict(
        study="s",
        storage="unused",
        scenario="azure-conv",
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        devices=1,
        slo=parse_slo("ttft=2s,tpot=200ms"),
    )
    live = TuneSpec(
        **base,
        backend="live",
        backend_options={
            "launch": "llama-server",
            "model_path": "/m.gguf",
            "program": "/bin/llama-server",
            "log_dir": "x",
            "health_timeout_s": 30.0,
        },
    )
    assert live.settings()["server"] == {"launch": "llama-server", "model_path": "/m.gguf"}
    assert TuneSpec(**base).settings()["server"] is None


def test_confirm_takes_the_top_distinct_configs_and_the_default():
    study = optuna.create_study(direction="maximize")
    for number, (chunk, value) in enumerate([(8192, 5.0), (2048, 9.0), (2048, 9.0), (4096, 7.0), (16384, 6.0)]):
        attrs = {"config": {**CPU, "chunk": chunk}, **({"role": "default"} if number == 0 else {})}
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs=attrs))
    assert [(role, t.number) for role, t in candidates(study, GOODPUT, 2)] == [
        ("top 1", 1),
        ("top 2", 3),
        ("default", 0),
    ]
    assert [(role, t.number) for role, t in candidates(study, GOODPUT, 4)] == [
        ("top 1", 1),
        ("top 2", 3),
        ("top 3", 4),
        ("top 4, default", 0),
    ]
    # the trial the study recommends (a tie broken by headroom, say) leads, whatever its value
    assert [(role, t.number) for role, t in candidates(study, GOODPUT, 2, best=4)] == [
        ("top 1", 4),
        ("top 2", 1),
        ("default", 0),
    ]


def test_ranks_share_ties_and_leave_failed_rows_out():
    rows = [ConfirmRow(n, "", {}, 1.0, measured, {}, None) for n, measured in enumerate([2.0, None, 3.0, 2.0])]
    assert ranks(rows, GOODPUT, lambda r: r.measured) == [2, None, 1, 2]
    assert ranks(rows, TTFT, lambda r: r.measured) == [1, None, 3, 1]


def tune_json(capsys, argv: list[str]) -> dict:
    status = run_cli(cli, [*argv, "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out)


def test_confirm_live_measures_the_top_configs_on_a_server_launched_for_each(model, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_ENGINE", "crash-once")
    monkeypatch.setenv("FAKE_ENGINE_ONCE", str(tmp_path / "launched"))
    db = tmp_path / "r.duckdb"
    out = tune_json(
        capsys,
        [
            *TUNE,
            "--trials",
            "4",
            "--db",
            str(db),
            "--confirm",
            "live",
            "--launch",
            "llama-server",
            "--program",
            FAKE,
            "--model-path",
            str(model),
        ],
    )
    rows = out["confirm"]
    assert rows[0]["role"].startswith("top 1") and sum("default" in r["role"] for r in rows) == 1
    assert rows[0]["trial"] == out["best"]["trial"]  # the recommended config leads
    first, rest = rows[0], rows[1:]
    assert first["measured"] is None and first["run_id"] is None
    assert first["error"].startswith("engine: llama-server exited with status 3 before it was healthy; log: ")
    assert "\n" not in first["error"] and first["error"].endswith("(last line: fake engine: giving up)")
    assert rest and all(r["error"] is None and r["measured"] > 0 and r["simulated"] > 0 for r in rest)
    assert len({json.dumps(r["config"], sort_keys=True) for r in rows}) == len(rows)
    with RunStore.open(db, read_only=True) as store:
        stored = {r.id: r for r in store.list_runs(study=out["study"])}
    assert {r["run_id"] for r in rest} <= {i for i, r in stored.items() if r.label == "confirm" and r.backend == "live"}
    assert out["best_run_id"] in stored and stored[out["best_run_id"]].backend == "sim"
    assert len(list((tmp_path / "r-servers").iterdir())) == len(rows)  # a fresh server per config, each logged


def test_confirm_live_with_an_endpoint_measures_the_server_once_beside_the_simulated_best(
    tmp_path, capsys, mock_server
):
    out = tune_json(
        capsys,
        [*TUNE, "--trials", "3", "--db", str(tmp_path / "r.duckdb"), "--confirm", "live", "--endpoint", mock_server],
    )
    (row,) = out["confirm"]
    assert row["role"].startswith("endpoint") and row["trial"] == out["best"]["trial"]
    assert row["simulated"] == out["best"]["value"] and row["measured"] > 0 and row["error"] is None


def test_a_live_tune_runs_each_trial_on_a_fresh_server_and_a_failed_one_fails_that_trial_only(
    model, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("FAKE_ENGINE", "crash-once")
    monkeypatch.setenv("FAKE_ENGINE_ONCE", str(tmp_path / "launched"))
    out = tune_json(
        capsys,
        [
            *TUNE,
            "--trials",
            "3",
            "--db",
            str(tmp_path / "r.duckdb"),
            "--backend",
            "live",
            "--launch",
            "llama-server",
            "--program",
            FAKE,
            "--model-path",
            str(model),
        ],
    )
    assert out["trials"] == 3 and out["confirm"] is None
    (failed,) = out["server_errors"]
    assert failed["trial"] == 0 and failed["error"].startswith("engine: llama-server exited with status 3")
    assert out["default"] is None and out["best"]["goodput_rps"] > 0 and out["best"]["metrics"]["bubble_ratio"] is None
    assert "-live" in out["study"]
    # three trials, then the best re-measured for the store: a fresh server each time
    assert len(list((tmp_path / "r-servers").iterdir())) == 4


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--confirm", "live"],
            "--confirm: give --launch ENGINE --model-path W (pipedeck starts a server per config) or --endpoint URL",
        ),
        (["--confirm", "live", "--launch", "nope"], "'--launch': 'nope' is not one of"),
        (["--confirm", "live", "--launch", "llama-server", "--program", FAKE], "--model-path: give the weights"),
        (
            ["--confirm", "live", "--launch", "llama-server", "--program", FAKE, "--model-path", "/nope.gguf"],
            "--model-path: llama-server loads a local GGUF file or a hub id org/name[:quant]; there is no file /nope.gguf",
        ),
        (
            [
                "--confirm",
                "live",
                "--launch",
                "llama-server",
                "--model-path",
                "MODEL",
                "--endpoint",
                "http://127.0.0.1:1",
            ],
            "--endpoint: give either --endpoint",
        ),
        (
            ["--confirm", "live", "--endpoint", "http://127.0.0.1:1", "--confirm-top", "0"],
            "--confirm-top: must be a positive integer, got 0",
        ),
        (["--confirm-top", "2"], "--confirm-top: only with --confirm live"),
        (["--launch", "llama-server"], "--launch: only with --confirm live or --backend live"),
        (["--backend", "live"], "--launch: a live tune starts a server per trial"),
        (["--backend", "live", "--endpoint", "http://127.0.0.1:1"], "--endpoint: a running server cannot apply"),
        (
            [
                "--backend",
                "live",
                "--launch",
                "llama-server",
                "--program",
                FAKE,
                "--model-path",
                "MODEL",
                "--jobs",
                "2",
            ],
            "--jobs: a live tune runs one server at a time",
        ),
        (["--backend", "live", "--confirm", "live"], "--confirm: confirms a simulated study"),
        (
            [
                "--confirm",
                "live",
                "--launch",
                "llama-server",
                "--program",
                FAKE,
                "--model-path",
                "MODEL",
                "--export",
                "o",
                "--format",
                "vllm",
            ],
            "--format: --export writes for vllm but --launch starts llama-server",
        ),
        (
            [
                "--confirm",
                "live",
                "--launch",
                "llama-server",
                "--program",
                FAKE,
                "--model-path",
                "MODEL",
                "--devices",
                "2",
            ],
            "--fix: tp: llama-server runs one process without tensor or pipeline parallelism; got tp=2 pp=1",
        ),
    ],
)
def test_tune_refuses_bad_live_options_with_one_line_before_any_work(model, tmp_path, capsys, extra, message):
    argv = [a if a != "MODEL" else str(model) for a in extra]
    base = UNPINNED if "--devices" in argv else TUNE  # two devices: the engine default is tp=2
    status = run_cli(cli, [*base, "--trials", "2", "--db", str(tmp_path / "r.duckdb"), *argv])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("pipedeck: error: Invalid value for ") and message in err
    assert not (tmp_path / "r.optuna.jsonl").exists() and not (tmp_path / "r-servers").exists()


def test_sigterm_stops_a_live_tune_and_its_server_as_ctrl_c_does(model, tmp_path):
    """`kill PID` (or a CI timeout) must not leave the launched server, which runs in a session of its own."""
    long_runs = ["400" if a == "12" else a for a in TUNE]  # --requests 400: a run lasts 50 s at 8 req/s
    argv = [
        sys.executable,
        "-m",
        "pipedeck.console",
        *long_runs,
        "--trials",
        "2",
        "--db",
        str(tmp_path / "r.duckdb"),
        "--backend",
        "live",
        "--launch",
        "llama-server",
        "--program",
        FAKE,
        "--model-path",
        str(model),
    ]
    tune = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # as `tune ... &` runs
    deadline = time.monotonic() + 60
    while not processes_serving(model) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the trial's first run is under way (400 requests at 8 req/s)
    serving = processes_serving(model)
    tune.send_signal(signal.SIGTERM)
    assert tune.wait(30) == 130 and "interrupted" in tune.stderr.read()
    assert serving, "a server ran when the signal came"
    assert processes_serving(model) == []
