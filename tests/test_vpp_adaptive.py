"""vpp-adaptive: identical to vpp under the linear law, better when stage times bend."""

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
