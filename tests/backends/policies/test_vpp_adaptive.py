"""vpp-adaptive: identical to vpp under the linear law, better when stage times bend."""

import pytest

from pipedeck.backends import ServingConfig
from pipedeck.backends.parts import AdaptiveSettings
from pipedeck.backends.policies.adaptive import AdaptiveChunk
from pipedeck.backends.policies.chunking import StepReport
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario
from tests.toy import run_shaped


def linear(x: float) -> float:
    return 1.0 + x


def bent(x: float) -> float:
    """Per-token cost growing with the square of the position (the law no longer holds)."""
    return 1.0 + 0.05 * x * x


def test_equals_vpp_exactly_when_the_cost_is_linear():
    plain, plain_spans = run_shaped("vpp", 12, linear)
    adaptive, adaptive_spans = run_shaped("vpp-adaptive", 12, linear)
    assert adaptive.sched.policy.resized_chunks == 0
    assert adaptive_spans == plain_spans
    assert adaptive.records == plain.records


def test_resizes_and_beats_vpp_when_the_cost_bends():
    plain, _ = run_shaped("vpp", 16, bent)
    adaptive, _ = run_shaped("vpp-adaptive", 16, bent)
    assert adaptive.sched.policy.resized_chunks > 0
    assert adaptive.sched.chunks > plain.sched.chunks
    ttft, ttft_plain = adaptive.records[0].first_token_s, plain.records[0].first_token_s
    assert ttft < 0.97 * ttft_plain
    bubble = ttft - adaptive.ranks[1].compute  # the middle rank's idle: the fold-back's imbalance
    assert bubble < 0.5 * (ttft_plain - plain.ranks[1].compute)


def report(chunks: list[tuple[int, int]], stage_s: float) -> StepReport:
    """A prefill-only step of (chunk, prefix) pieces, as the engine reports it."""
    return StepReport(
        finished_at=0.0,
        latency_s=stage_s,
        stage_s=stage_s,
        prefill_tokens=sum(c for c, _ in chunks),
        decode_tokens=0,
        chunk_prefix=float(sum(c * p for c, p in chunks)),
        chunk_sq=float(sum(c * c for c, _ in chunks)),
        decode_context=0.0,
        ttfts=(),
        token_gaps=(),
        kv_free=1.0,
        running=len(chunks),
        waiting=0,
        backlog_tokens=0,
        admissible_tokens=0,
        finished_prompt_tokens=0,
        arrived=len(chunks),
    )


def test_the_law_is_fitted_on_distinct_prefixes_of_lone_full_chunks():
    policy = AdaptiveChunk(
        base=512,
        settings=AdaptiveSettings(adaptive_threshold=0.05, adaptive_fit_chunks=2),
        stage_time=lambda chunk, prefix: 1e-3 * chunk + 1e-7 * chunk * prefix,
    )
    policy.request_chunk(0)
    policy.observe(report([(256, 0), (256, 0)], 0.5))  # two prompts' first chunks packed: not one chunk's time
    policy.observe(report([(512, 0)], 0.5))
    policy.observe(report([(512, 0)], 0.51))  # another prompt's first chunk, finishing after this prompt began
    assert policy.law is None
    policy.observe(report([(512, 512)], 0.6))
    intercept, slope = policy.law
    assert intercept == pytest.approx(0.5) and slope == pytest.approx(0.1 / 512)


def test_short_prompts_packed_into_full_chunks_run():
    """Single-chunk prompts measured at prefix 0 only once made the fit singular (numpy's SVD failed)."""
    config = ServingConfig.of(
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        tp=1,
        pp=4,
        mode="vpp-adaptive",
        chunk=2000,
        max_running=2,
        adaptive_fit_chunks=2,
    )
    result = SimBackend().run(load_scenario("azure-conv"), config, num_requests=200, timeline=False)
    assert len(result.records) == 200
