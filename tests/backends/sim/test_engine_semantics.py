"""Engine semantics knobs: whether decodes share the chunk budget, whether steps mix decodes and prefill."""

import dataclasses

import pytest

from pipedeck.backends import ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.backends.sim.backend import build_engine
from pipedeck.backends.sim.request import SimRequest
from pipedeck.scenarios import ClosedLoop, Poisson, Scenario, load_scenario
from pipedeck.scenarios.arrivals import AllAtOnce
from pipedeck.scenarios.lengths import Fixed
from tests.emissions import trace

CHUNK = 512


def batches(**knobs):
    """Every micro-batch (prefill tokens, all tokens) of a short azure-conv run on qwen2.5-14b, PP2."""
    config = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2, chunk=CHUNK, **knobs).resolve()
    engine = build_engine(config)
    seen: list[tuple[int, int]] = []
    trace(engine).on_formed.append(lambda batch: seen.append((batch.prefill_tokens, batch.tokens)))
    workload = load_scenario("azure-conv").workload(seed=0, rate=20.0, num_requests=120)
    engine.run([SimRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests], None)
    assert len(engine.records) == 120
    return seen


def test_vllm_semantics_keep_every_step_within_the_budget():
    seen = batches()
    assert all(tokens <= CHUNK for _, tokens in seen)
    assert any(0 < prefill < tokens for prefill, tokens in seen)  # mixed steps happen


def test_budget_outside_the_decodes_bounds_prefill_only():
    seen = batches(decode_in_budget=False)
    assert all(prefill <= CHUNK for prefill, _ in seen)
    assert any(tokens > CHUNK and prefill > 0 for prefill, tokens in seen)


@pytest.mark.parametrize("decode_in_budget", [True, False])
def test_unmixed_steps_are_all_prefill_or_all_decode(decode_in_budget):
    seen = batches(mixed_batches=False, decode_in_budget=decode_in_budget)
    assert all(prefill in (0, tokens) for prefill, tokens in seen)
    assert any(prefill == 0 for prefill, _ in seen) and any(prefill > 0 for prefill, _ in seen)


@pytest.mark.parametrize("arrivals", ["closed", "open"])
def test_a_request_overhead_delays_each_first_token_by_itself_and_nothing_else(arrivals):
    """One request at a time: every TTFT grows by exactly the overhead, and the token gaps stay as they were."""
    config = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=1, chunk=CHUNK).resolve()
    process, rate = (ClosedLoop(1), None) if arrivals == "closed" else (Poisson(), 0.5)  # far apart: no overlap
    scenario = Scenario("one-by-one", "-", "-", "-", Fixed(300), Fixed(20), process, 12, rate=rate)

    def run(overhead_ms: float):
        hw = dataclasses.replace(config.hardware_profile, request_overhead_ms=overhead_ms)
        return SimBackend().run(scenario, dataclasses.replace(config, hardware_profile=hw), timeline=False)

    base, slow = run(0.0), run(5.0)
    assert [t - 5e-3 for t in slow.ttfts()] == pytest.approx(list(base.ttfts()), abs=1e-12)
    assert list(slow.tpots()) == pytest.approx(list(base.tpots()), abs=1e-12)


def test_a_prompt_prefilled_beside_another_pays_for_its_kv_only_in_a_shared_pool():
    """Two 2600-token prompts at once: the second's prefill, mostly after the first's and while the first one
    decodes, scans the first one's KV too in a shared pool (kv_pool_scan_ns), so the scan lengthens it by more
    than it lengthens the first's."""
    config = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=1, chunk=CHUNK).resolve()
    scenario = Scenario("pair", "-", "-", "-", Fixed(2600), Fixed(64), AllAtOnce(), 2)

    def prefills(scan_ns: float) -> tuple[float, float]:
        hw = dataclasses.replace(config.hardware_profile, kv_pool_scan_ns=scan_ns)
        first, second = sorted(SimBackend().run(scenario, dataclasses.replace(config, hardware_profile=hw)).ttfts())
        return first, second - first

    (paged_first, paged_second), (shared_first, shared_second) = prefills(0.0), prefills(5.0)
    assert shared_first > paged_first  # its own KV is in the pool too
    assert shared_second - paged_second > 1.5 * (shared_first - paged_first)


def test_pipeline_ranks_sharing_one_host_prefill_a_lone_prompt_no_faster_than_one_rank(tiny_config):
    """A 2K-token prompt alone (the tiny llama of tests/live), compute only (host times and handoffs set to 0): where the
    ranks share the host's cores (cpu-host), each of two pipeline ranks runs at half the host's rate, so
    pipelining the prompt's 8 chunks gains nothing over one rank with every core; where each rank has a device
    of its own, the same pipeline prefills it in about (8 + 1) / 2 chunk times instead of 8."""
    scenario = Scenario("lone", "-", "-", "-", Fixed(2048), Fixed(2), AllAtOnce(), 1)

    def ttft(pp: int, shared: bool) -> float:
        config = ServingConfig.of(
            model=str(tiny_config), hardware="cpu-host", tp=1, pp=pp, chunk=256, kv_capacity=8192
        ).resolve()
        hw = dataclasses.replace(
            config.hardware_profile,
            ranks_share_device=shared,
            step_overhead_ms=0.0,
            stage_overhead_ms=0.0,
            request_overhead_ms=0.0,
            kernel_launch_us=0.0,
            p2p_latency_us=0.0,
            p2p_bandwidth_gbs=1e6,
        )
        return SimBackend().run(scenario, dataclasses.replace(config, hardware_profile=hw)).ttfts()[0]

    assert ttft(2, shared=True) > ttft(1, shared=True)
    assert ttft(2, shared=False) < 0.6 * ttft(1, shared=False)
