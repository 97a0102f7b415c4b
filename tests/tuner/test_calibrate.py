"""`pipedeck calibrate` without a real server: the fit recovers known constants, the plan, the CLI and its errors."""

from __future__ import annotations

import dataclasses
import json
import sys
import tomllib
from pathlib import Path

import pytest

from pipedeck.backends import HardwareProfile, ResolvedConfig, ServingConfig, load_hardware, make_backend
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import QUICK_PASSES, fit, measure, plan, profile, profiled_points
from pipedeck.tuner.calibrate import FITTED, PIPELINE, POOL_SCAN, CalibrationError, constants_to_fit
from tests.mock_program import mock_program
from tests.paths import DATA, TESTS

START = str(TESTS / "live" / "cpu-host.toml")
FAKE = (sys.executable, str(DATA / "fake_engine.py"))


@pytest.fixture(scope="module")
def tiny(tiny_config) -> str:
    """The tiny llama's config.json as the --model value (tests/live serves the same model)."""
    return str(tiny_config)


def config_of(model: str, **changes: object) -> ResolvedConfig:
    values = dict(model=model, hardware=START, tp=1, pp=1, chunk=512, max_running=2, kv_capacity=4096)
    return ServingConfig.of(**{**values, **changes}).resolve()


# The constants a hidden server runs on, each a factor 3 or more from the start's (tests/live/cpu-host.toml).
TRUTH = {
    "step_overhead_ms": 0.4,
    "request_overhead_ms": 6.0,
    "matmul_efficiency": 0.02,
    "attention_efficiency": 0.01,
    "attention_half_tokens": 20.0,
}


class HiddenServer:
    """The simulator on constants the fit is not told: a stand-in for a live server that follows the model exactly."""

    name = "sim"

    def __init__(self, hardware):
        self.hardware, self.sim = hardware, make_backend("sim")

    def run(self, scenario, config, rate=None, seed=0, num_requests=None, observer=None, timeline=True):
        hidden = dataclasses.replace(config, hardware_profile=self.hardware)
        return self.sim.run(scenario, hidden, rate, seed, num_requests, observer, timeline)


def test_the_fit_recovers_the_constants_the_runs_were_measured_with(tiny):
    config = config_of(tiny)
    truth = {**TRUTH, "kv_pool_scan_ns": 5.0}  # the start (tests/live/cpu-host.toml) gives the scan a time: fitted
    assert {c.name for c in constants_to_fit(config.hardware_profile, shared_pool=False)} == set(truth)
    for name, value in truth.items():  # every constant starts a factor 3 or more away
        assert max(value / getattr(config.hardware_profile, name), getattr(config.hardware_profile, name) / value) >= 3
    server = HiddenServer(dataclasses.replace(config.hardware_profile, **truth))
    measured = measure(server, config, plan(config), passes=1, seed=3)
    result = fit(measured, config.hardware_profile, constants_to_fit(config.hardware_profile, shared_pool=False))
    for name, value in truth.items():
        assert getattr(result.hardware, name) == pytest.approx(value, rel=0.03), name
        assert result.spread[name] < 1.05 and not result.at_bound
    assert max(result.worst(held_out=True)) < 0.01
    assert result.hardware.peak_tflops == config.hardware_profile.peak_tflops  # the rest is the start's


def test_a_pipeline_fit_recovers_the_handoff_between_stages_from_latencies_and_bubble_shares(tiny):
    """One stage and two (fitted; two at another chunk size held out), the two-stage runs profiled: the fit
    predicts the held-out config's latencies and bubble shares. Of the host times it recovers what the runs
    time: a step at pp 1 (step_overhead + one stage's) and a lone token at pp 2 (step_overhead + two stages' +
    the handoff), and the handoff's rate per byte; how a step's host time divides between the scheduler and
    the ranks is only loosely pinned by such runs, and it is not asserted."""
    base = config_of(tiny)
    two = config_of(tiny, pp=2)
    smaller = config_of(tiny, pp=2, chunk=128)
    truth = {
        **TRUTH,
        "kv_pool_scan_ns": 1.0,
        "stage_overhead_ms": 1.5,
        "kernel_launch_us": 10.0,
        "p2p_latency_us": 3000.0,
        "p2p_bandwidth_gbs": 0.01,
    }
    constants = constants_to_fit(base.hardware_profile, shared_pool=False, pipeline=True)
    assert {c.name for c in constants} == set(truth) and constants[-len(PIPELINE) :] == PIPELINE
    server = HiddenServer(dataclasses.replace(base.hardware_profile, **truth))
    measured = []
    for label, config, held_out in (("", base, False), ("pp=2", two, False), ("pp=2 chunk=128", smaller, True)):
        runs = measure(server, config, plan(config, variant=label, held_out=held_out), passes=1, seed=3)
        if config.parallelism.pp > 1:
            points = profiled_points([m.point for m in runs])
            profile(server, [m for m in runs if m.point in points], seed=3)
        measured += runs
    assert all((m.bubble() or 0) > 0 for m in measured if m.profiled) and any(m.profiled for m in measured)
    result = fit(measured, base.hardware_profile, constants)
    hw = result.hardware

    def lone_token(pp: int, p: HardwareProfile) -> float:
        return p.step_overhead_ms + pp * p.stage_overhead_ms + (pp - 1) * p.p2p_latency_us / 1e3

    true = dataclasses.replace(base.hardware_profile, **truth)
    assert lone_token(1, hw) == pytest.approx(lone_token(1, true), rel=0.05)
    assert lone_token(2, hw) == pytest.approx(lone_token(2, true), rel=0.05)
    assert hw.p2p_bandwidth_gbs == pytest.approx(truth["p2p_bandwidth_gbs"], rel=0.05)
    assert max(result.worst(held_out=True)) < 0.02
    held_bubble = result.worst_bubble(held_out=True)
    assert held_bubble is not None and held_bubble < 0.02
    assert all(r.point.held_out for r in result.rows if r.point.name.startswith("pp=2 chunk=128 "))


def test_the_pool_scan_is_fitted_only_where_a_shared_pool_is_declared_or_started_from(tiny):
    paged = dataclasses.replace(config_of(tiny).hardware_profile, kv_pool_scan_ns=0.0)
    assert constants_to_fit(paged, shared_pool=False) == FITTED  # a paged engine's calibration leaves it at 0
    assert constants_to_fit(paged, shared_pool=True) == (*FITTED, POOL_SCAN)  # llama-server's launch declares it
    assert constants_to_fit(dataclasses.replace(paged, kv_pool_scan_ns=1.0), shared_pool=False)[-1] == POOL_SCAN


def test_the_plan_scales_with_the_config_and_holds_out_other_lengths_and_loads(tiny):
    for max_running, kv in ((2, 4096), (16, 65536)):
        config = config_of(tiny, max_running=max_running, kv_capacity=kv)
        points = plan(config)
        share = kv // max_running
        top = min(max_running, 8)
        assert {p.concurrency for p in points} == {1, top, None}
        for point in points:  # the longest prompt and answer a run can draw fit in one request's KV share
            assert point.prompt * 3 // 2 + point.output * 3 // 2 <= share
        fitted = [p for p in points if not p.held_out]
        held = [p for p in points if p.held_out]
        assert len(fitted) >= 5 and len(held) >= 3
        assert not {(p.prompt, p.output) for p in held} & {(p.prompt, p.output) for p in fitted}
        assert {p.load for p in held if p.load}.isdisjoint({p.load for p in fitted if p.load})
        for point in points:
            if point.reference:
                assert next(p for p in points if p.name == point.reference).held_out == point.held_out


def test_too_little_kv_per_request_is_one_line(tiny):
    with pytest.raises(CalibrationError, match=r"^kv_capacity: calibrate needs at least \d+ tokens of KV cache per "):
        plan(config_of(tiny, max_running=8, kv_capacity=1024))


@pytest.fixture(scope="module")
def fast_server():
    """The mock streaming server with fast tokens (the CLI's plumbing, not the fit, is under test here)."""
    with mock_program("--token-s", "0.0002", "--first-token-s", "0.002") as url:
        yield url


def calibrate_argv(model: str, out: Path, *extra: str) -> list[str]:
    return [
        "calibrate",
        "--model",
        model,
        "--hardware",
        START,
        "--tp",
        "1",
        "--pp",
        "1",
        "--chunk",
        "512",
        "--max-running",
        "2",
        "--kv-capacity",
        "2048",
        "--out",
        str(out),
        *extra,
    ]


def test_calibrate_writes_a_loadable_profile_with_its_sources_and_runs_and_stores_the_runs(
    tiny, fast_server, tmp_path, capsys
):
    out, db = tmp_path / "mock.toml", tmp_path / "runs.duckdb"
    out.write_text("an older file")
    argv = calibrate_argv(tiny, out, "--endpoint", fast_server, "--quick", "--db", str(db), "--json")
    assert run_cli(cli, argv) == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    profile = load_hardware(out)
    assert profile.name == "mock"
    for c in FITTED:
        source = profile.sources[c.name]
        assert source.startswith(f"fitted by pipedeck calibrate on llama.cpp b0-mock at {fast_server}, ")
        assert getattr(profile, c.name) == report["fitted"][c.name]["value"]
    assert profile.peak_tflops == load_hardware(START).peak_tflops
    record = tomllib.loads(out.read_text())["calibration"]
    assert record["engine"] == "llama.cpp b0-mock" and record["start"] == START
    runs = record["runs"]
    assert [r["name"] for r in runs] == [r["name"] for r in report["runs"]] and {r["set"] for r in runs} == {
        "fit",
        "held-out",
    }
    for run in runs:
        assert run["ttft_error"] == pytest.approx(
            run["simulated_ttft_p50_ms"] / run["measured_ttft_p50_ms"] - 1, abs=2e-3
        )
    with RunStore.open(db, read_only=True) as store:
        assert len(report["run_ids"]) == QUICK_PASSES * len(runs)
        assert store.get_run(report["run_ids"][0]).result.backend == "live"


def test_calibrate_needs_one_server(tiny, tmp_path, capsys):
    assert run_cli(cli, calibrate_argv(tiny, tmp_path / "x.toml")) == 2
    assert "--endpoint URL or --launch ENGINE" in capsys.readouterr().err
    assert (
        run_cli(cli, calibrate_argv(tiny, tmp_path / "x.toml", "--endpoint", "http://x", "--launch", "llama-server"))
        == 2
    )
    assert run_cli(cli, calibrate_argv(tiny, tmp_path / "x.toml", "--launch", "llama-server")) == 2
    assert "--model-path" in capsys.readouterr().err


def test_an_unreachable_endpoint_is_one_line_and_keeps_the_old_profile(tiny, tmp_path, capsys):
    out = tmp_path / "kept.toml"
    out.write_text("the previous calibration")
    assert run_cli(cli, calibrate_argv(tiny, out, "--endpoint", "http://127.0.0.1:9", "--no-store")) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("pipedeck: error: endpoint: http://127.0.0.1:9/v1/models lists no model")
        and err.count("\n") == 1
    )
    assert out.read_text() == "the previous calibration"


def test_a_failed_calibrate_creates_no_store_or_log_and_leaves_an_existing_store_untouched(tiny, tmp_path, capsys):
    db, log, out = tmp_path / "runs.duckdb", tmp_path / "serve.log", tmp_path / "x.toml"
    dead = calibrate_argv(tiny, out, "--endpoint", "http://127.0.0.1:9", "--db", str(db))
    missing = calibrate_argv(
        tiny,
        out,
        "--launch",
        "llama-server",
        "--model-path",
        "t.gguf",
        "--program",
        str(tmp_path / "no-such-llama-server"),
        "--log",
        str(log),
        "--db",
        str(db),
    )
    for argv in (dead, missing):
        assert run_cli(cli, argv) == 1  # a server that is down or cannot start: a failure while running
        assert capsys.readouterr().err.count("\n") == 1
        assert not db.exists() and not log.exists()
    RunStore.open(db).close()
    kept = db.read_bytes()
    assert run_cli(cli, dead) == 1
    assert db.read_bytes() == kept


def test_an_unwritable_or_unloadable_out_is_refused_before_any_work(tiny, tmp_path, capsys):
    assert run_cli(cli, calibrate_argv(tiny, tmp_path / "missing" / "x.toml", "--endpoint", "http://x")) == 2
    assert capsys.readouterr().err.startswith("pipedeck: error: Invalid value for --out: folder ")
    assert run_cli(cli, calibrate_argv(tiny, tmp_path / "x.json", "--endpoint", "http://x")) == 2
    assert "a hardware profile is a .toml file" in capsys.readouterr().err


def test_a_launched_server_is_stopped_when_calibrate_fails(tiny, tmp_path, capsys, popen_log):
    started = popen_log
    argv = calibrate_argv(
        tiny,
        tmp_path / "x.toml",
        "--launch",
        "llama-server",
        "--model-path",
        "t.gguf",
        "--program",
        " ".join(FAKE),
        "--log",
        str(tmp_path / "serve.log"),
        "--no-store",
    )
    assert run_cli(cli, argv) == 1  # the fake engine answers /health and nothing else
    assert "lists no model" in capsys.readouterr().err
    assert started and started[0].poll() is not None and not (tmp_path / "x.toml").exists()


def test_a_variant_needs_a_launch_and_names_its_bad_change_in_one_line(tiny, tmp_path, capsys):
    endpoint = calibrate_argv(tiny, tmp_path / "x.toml", "--endpoint", "http://127.0.0.1:9", "--variant", "pp=2")
    assert run_cli(cli, endpoint) == 2
    err = capsys.readouterr().err
    assert "--variant" in err and "needs --launch" in err and err.count("\n") == 1
    launched = ("--launch", "llama-server", "--model-path", "t.gguf", "--log", str(tmp_path / "s.log"))
    for flag, change, words in (
        ("--hold-out", "bogus=1", "bogus"),
        ("--variant", "pp=3", "layer"),  # the tiny llama's 2 layers cannot make 3 stages
        ("--variant", "pp", "key=value"),
    ):
        assert run_cli(cli, calibrate_argv(tiny, tmp_path / "x.toml", *launched, flag, change)) == 2
        err = capsys.readouterr().err
        assert flag in err and words in err and err.count("\n") == 1, err
    assert not (tmp_path / "s.log").exists()  # refused before any server started
