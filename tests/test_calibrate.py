"""Calibration without a real server: the fit recovers known constants; the plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pipedeck.backends.config import ResolvedConfig, ServingConfig
from pipedeck.backends.registry import make_backend
from pipedeck.tuner.calibrate import FITTED, CalibrationError, fit, measure, plan

from tests.live.llama_server import make_config

START = str(Path(__file__).parent / "live" / "cpu-host.toml")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    """The tiny llama's config.json (tests/live serves the same model)."""
    return str(make_config(tmp_path_factory.mktemp("model") / "tiny-llama.json"))


def config_of(model: str, **changes: object) -> ResolvedConfig:
    values = dict(model=model, hardware=START, tp=1, pp=1, chunk=512, max_running=2, kv_capacity=4096)
    return ServingConfig(**{**values, **changes}).resolve()


class HiddenServer:
    """The simulator on constants the fit is not told: a stand-in for a live server that follows the model exactly."""

    name = "sim"

    def __init__(self, hardware):
        self.hardware, self.sim = hardware, make_backend("sim")

    def run(self, scenario, config, rate=None, seed=0, num_requests=None, observer=None, timeline=True):
        hidden = ResolvedConfig.of(config, config.model_profile, self.hardware)
        return self.sim.run(scenario, hidden, rate, seed, num_requests, observer, timeline)


def test_the_fit_recovers_the_constants_the_runs_were_measured_with(tiny):
    config = config_of(tiny)
    truth = {"step_overhead_ms": 0.4, "request_overhead_ms": 6.0, "matmul_efficiency": 0.02,
             "attention_efficiency": 0.01, "attention_half_tokens": 20.0}
    assert {c.name for c in FITTED} == set(truth)
    for name, value in truth.items():  # every constant starts a factor 3 or more away
        assert max(value / getattr(config.hardware_profile, name), getattr(config.hardware_profile, name) / value) >= 3
    server = HiddenServer(dataclasses.replace(config.hardware_profile, **truth))
    measured = measure(server, config, plan(config), rounds=1, seed=3)
    result = fit(measured, config)
    for name, value in truth.items():
        assert getattr(result.hardware, name) == pytest.approx(value, rel=0.02), name
        assert result.spread[name] < 1.05 and not result.at_bound
    assert max(result.worst(held_out=True)) < 0.01
    assert result.hardware.peak_tflops == config.hardware_profile.peak_tflops  # the rest is the start's


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
        assert {p.load for p in held if p.load} .isdisjoint({p.load for p in fitted if p.load})
        for point in points:
            if point.reference:
                assert next(p for p in points if p.name == point.reference).held_out == point.held_out


def test_too_little_kv_per_request_is_one_line(tiny):
    with pytest.raises(CalibrationError, match=r"^kv_capacity: calibrate needs at least \d+ tokens of KV cache per "):
        plan(config_of(tiny, max_running=8, kv_capacity=1024))
