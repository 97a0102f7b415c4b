"""Decoding in groups gives the results of the one-by-one loop, to the last bit.

Every mode on every scenario of benchmarks/sim_speed.py (fewer requests),
and cases that drive the grouped path through its rare branches: a step
budget that ends inside a group, preemption when the cache fills, SGLang's
per-slot running batches, separate prefill and decode steps, and DSA's
capped contexts.
"""

from __future__ import annotations

import pytest

from pipedeck.backends import MODES, ServingConfig
from pipedeck.backends.config import SGLANG_MIXED_CHUNK
from pipedeck.backends.sim import SimBackend, compiled
from pipedeck.backends.sim.digest import run_digest
from pipedeck.backends.sim.groups import DecodeGroup
from pipedeck.scenarios import load_scenario
from tests.paths import ROOT

TRACE = ROOT.parent / "shared" / "bench" / "vidur-trace"
SCENARIOS = {  # name: (scenario, rate, requests, config fields)
    "mixed-gsm8k": ("mixed-gsm8k", None, 30, {"chunk": 16 * 1024}),
    "azure-conv": ("azure-conv", 3.0, 50, {"chunk": 16 * 1024}),
    # the shared trace's lengths and model; an 80 GB card of the catalogue (the path, not the timing, is under test)
    "vidur-trace": (
        str(TRACE / "requests-1000.csv"),
        None,
        40,
        {
            "model": str(TRACE / "llama-2-70b-config.json"),
            "hardware": "h100-sxm",
            "tp": 2,
            "pp": 2,
            "chunk": 512,
            "max_running": 512,
        },
    ),
}
KV_TIGHT = {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie", "tp": 2, "pp": 2, "kv_capacity": 40_000}
RARE = {  # name: (scenario, rate, requests, config fields)
    # prefill-only steps queue small groups until a decode step's budget ends inside one
    "budget ends inside a group": (
        "sharegpt",
        200.0,
        150,
        {**KV_TIGHT, "kv_capacity": None, "chunk": 64, "mixed_batches": False},
    ),
    "preemption": ("azure-conv", 20.0, 120, {**KV_TIGHT, "chunk": 1024, "output_reserve": 0.0}),
    "sglang slots": (
        "cnn-reversed",
        3.0,
        60,
        {**KV_TIGHT, **SGLANG_MIXED_CHUNK, "sticky_decodes": True, "chunk": 256, "pp": 4, "tp": 1},
    ),
    "sglang prefill apart": (
        "cnn-reversed",
        3.0,
        60,
        {
            **KV_TIGHT,
            **SGLANG_MIXED_CHUNK,
            "sticky_decodes": True,
            "mixed_batches": False,
            "decode_in_budget": False,
            "chunk": 256,
            "pp": 4,
            "tp": 1,
        },
    ),
    "dsa caps": ("azure-conv", 20.0, 60, {"model": "glm-5.2", "chunk": 4096}),
}


def both_paths(scenario: str, rate: float | None, requests: int, fields: dict) -> tuple[str, str, object]:
    """Digests of the grouped and the exact run, and the grouped run's result."""
    if scenario.startswith(str(TRACE)) and not TRACE.is_dir():
        pytest.skip(f"the shared trace is not at {TRACE}")
    config = ServingConfig.of(**fields).resolve()
    runs = [
        SimBackend(exact_decode=exact).run(load_scenario(scenario), config, rate=rate, num_requests=requests)
        for exact in (False, True)
    ]
    return run_digest(runs[0]), run_digest(runs[1]), runs[0]


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_grouped_decoding_matches_the_exact_loop(name, mode):
    scenario, rate, requests, fields = SCENARIOS[name]
    grouped, exact, result = both_paths(scenario, rate, requests, {**fields, "mode": mode})
    assert len(result.records) == requests and result.spans  # the timeline is part of the digest
    assert grouped == exact


@pytest.mark.parametrize("name", sorted(RARE))
def test_grouped_decoding_matches_the_exact_loop_on_rare_branches(name, monkeypatch):
    splits = []
    if not compiled():  # compiled code calls split natively; the pure core shows the case reaches it
        split = DecodeGroup.split
        monkeypatch.setattr(DecodeGroup, "split", lambda g, k: splits.append(k) or split(g, k))
    scenario, rate, requests, fields = RARE[name]
    grouped, exact, result = both_paths(scenario, rate, requests, fields)
    assert grouped == exact
    if name in ("budget ends inside a group", "preemption") and not compiled():
        assert splits
    if name == "preemption":
        assert result.preemptions > 0
    if name == "dsa caps":  # some contexts reach the 2048-key cap while decoding
        assert any(r.prompt_tokens < 2048 < r.prompt_tokens + r.output_tokens for r in result.records)
