"""FastPP's chunk controllers: the greedy SLO-feedback rules, RLS, the predictive (ALP) choice, end to end."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from pipedeck.backends import MODES, ServingConfig, declared_knobs
from pipedeck.backends.parts import FastPPSettings
from pipedeck.backends.policies.chunking import StepReport
from pipedeck.backends.policies.fastpp_alp import PredictiveChunkController
from pipedeck.backends.policies.fastpp_greedy import GreedyChunkController
from pipedeck.backends.policies.modes import PolicyEnv
from pipedeck.backends.policies.rls import RecursiveLeastSquares
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario


def report(**fields: object) -> StepReport:
    """A completed step with nothing in it but what the test sets."""
    base = dict(
        finished_at=0.0,
        latency_s=0.05,
        stage_s=0.01,
        prefill_tokens=0,
        decode_tokens=0,
        chunk_prefix=0.0,
        chunk_sq=0.0,
        decode_context=0.0,
        ttfts=(),
        token_gaps=(),
        kv_free=0.5,
        running=10,
        waiting=0,
        backlog_tokens=0,
        arrived=0,
    )
    base.update(fields)
    base.setdefault("admissible_tokens", base["backlog_tokens"])  # admission blocks nothing unless a test says so
    base.setdefault("finished_prompt_tokens", 0)
    return StepReport(**base)  # type: ignore[arg-type]


# -- greedy ------------------------------------------------------------------------
# SLO 2 s / 0.2 s with FastPP's ratios: shrink above TPOT 0.216 or below TTFT 0.2;
# grow above TTFT 0.6 while TPOT < 0.17.
GROW = dict(ttfts=(1.0,), token_gaps=(0.1,))


def greedy(**changes: object) -> GreedyChunkController:
    config = ServingConfig.of(pp=1, chunk=1024, controller_base_chunk=512).replace(**changes)
    return GreedyChunkController(pp=config.parallelism.pp, chunk=config.scheduling.chunk, settings=config.fastpp)


def decide(controller: GreedyChunkController, **fields: object) -> int:
    """Feed one window of pp steps, the observations in the first; returns the chunk decided."""
    controller.observe(report(**fields))
    for _ in range(controller.pp - 1):
        controller.observe(report(kv_free=fields.get("kv_free", 0.5), running=fields.get("running", 10)))
    return controller.chunk


def test_greedy_starts_at_the_base_chunk_clamped_to_the_range():
    assert greedy().chunk == 512 and greedy().history == [512]
    assert greedy(controller_base_chunk=4096).chunk == 1024
    assert greedy(controller_base_chunk=64, controller_min_chunk=256).chunk == 256


@pytest.mark.parametrize("running, chunk", [(300, 384), (256, 384), (0, 128), (5000, 1024)])
def test_greedy_kv_pressure_resets_first_even_when_latencies_say_grow(running, chunk):
    g = greedy()
    assert decide(g, kv_free=0.05, running=running, **GROW) == chunk
    assert decide(g, kv_free=0.5, running=running, **GROW) == min(chunk + 128, 1024)


def test_greedy_shrinks_on_a_tpot_violation_judged_by_the_window_p90():
    g = greedy()
    assert decide(g, ttfts=(1.0,), token_gaps=(0.1,) * 9 + (0.5,)) == 640  # P90 of ten gaps is the 9th: 0.1
    assert decide(g, ttfts=(1.0,), token_gaps=(0.1,) * 8 + (0.5,) * 2) == 512  # now 0.5 > 1.08 x 0.2


def test_greedy_shrinks_when_ttft_is_far_below_its_slo():
    assert decide(greedy(), ttfts=(0.1, 0.15), token_gaps=(0.1,)) == 384


def test_greedy_grows_when_ttft_is_late_and_tpot_is_safe():
    g = greedy()
    assert [decide(g, **GROW) for _ in range(3)] == [640, 768, 896]
    assert g.history == [512, 640, 768, 896]


@pytest.mark.parametrize(
    "fields",
    [
        dict(ttfts=(0.5,), token_gaps=(0.1,)),  # TTFT between low and high
        dict(ttfts=(1.0,), token_gaps=(0.18,)),  # TTFT late but TPOT above the safe line (and not violating)
        dict(ttfts=(1.0,)),  # no decode observed: the TPOT conditions are false
        dict(token_gaps=(0.1,)),  # no first token observed: the TTFT conditions are false
        dict(),
    ],
)
def test_greedy_keeps_the_chunk_otherwise(fields):
    assert decide(greedy(), **fields) == 512


def test_greedy_clamps_at_min_and_max():
    low = greedy(controller_base_chunk=128)
    assert decide(low, ttfts=(0.1,), token_gaps=(0.1,)) == 128
    assert decide(low, token_gaps=(0.3,)) == 128
    high = greedy(controller_base_chunk=1024)
    assert decide(high, **GROW) == 1024
    assert decide(high, **GROW) == 1024
    assert decide(high, token_gaps=(0.3,)) == 896


def test_greedy_decides_only_every_pp_steps_from_the_whole_window():
    g = greedy(pp=3)
    g.observe(report(ttfts=(1.0,)))
    g.observe(report(token_gaps=(0.1,)))
    assert g.chunk == 512 and g.history == [512]
    g.observe(report())  # third step: TTFT from step one and TPOT from step two make a grow
    assert g.chunk == 640
    for _ in range(3):  # the window was emptied: nothing observed, keep
        g.observe(report())
    assert g.history == [512, 640, 640]
    g.observe(report(kv_free=0.01, running=10))
    g.observe(report(kv_free=0.5, running=10))
    assert g.chunk == 640  # KV is judged when deciding, from the latest step
    g.observe(report(kv_free=0.01, running=10))
    assert g.chunk == 128


# -- RLS ------------------------------------------------------------------------------
def synthetic(rng: np.random.Generator, theta: np.ndarray, n: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform([0.5, 0.0, 0.0], [1.0, 1.0, 1.0], size=(n, 3))
    return x, x @ theta * (1 + noise * rng.standard_normal(n))


def fit(model: RecursiveLeastSquares, x: np.ndarray, y: np.ndarray) -> RecursiveLeastSquares:
    for row, target in zip(x, y):
        model.update(row, float(target))
    return model


def test_rls_recovers_known_coefficients_from_noisy_data():
    rng = np.random.default_rng(1)
    theta = np.array([3.0, -1.0, 0.5])
    model = fit(RecursiveLeastSquares(3), *synthetic(rng, theta, 2000, 0.01))
    np.testing.assert_allclose(model.coefficients, theta, rtol=0.05, atol=0.02)
    x, y = synthetic(rng, theta, 500, 0.01)
    mape = 100 * np.mean([abs(model.predict(row) - t) / t for row, t in zip(x, y)])
    print(f"\nRLS held-out MAPE (3 features, 1% noise): {mape:.3f}%")
    assert mape < 5


def test_rls_tracks_a_change_of_coefficients_only_with_forgetting():
    rng = np.random.default_rng(2)
    before, after = np.array([3.0, -1.0, 0.5]), np.array([1.0, 1.0, 2.0])
    first, second = synthetic(rng, before, 1500, 0.01), synthetic(rng, after, 1500, 0.01)
    forgetting = fit(fit(RecursiveLeastSquares(3, 0.9975), *first), *second)
    memory = fit(fit(RecursiveLeastSquares(3, 1.0), *first), *second)
    np.testing.assert_allclose(forgetting.coefficients, after, rtol=0.05, atol=0.05)
    assert np.abs(memory.coefficients - after).max() > 0.3  # no forgetting: stuck between the two


def test_rls_stays_finite_when_one_direction_goes_unexcited():
    model = RecursiveLeastSquares(3, forgetting=0.9)
    for _ in range(10000):  # unguarded, P would grow by 0.9^-10000 along the other two axes: inf, then nan
        model.update([1.0, 0.0, 0.0], 2.0)
    assert np.all(np.isfinite(model.coefficients))
    model.update([0.0, 1.0, 0.0], 5.0)
    np.testing.assert_allclose(model.coefficients, [2.0, 5.0, 0.0], atol=0.01)


def test_rls_rejects_bad_input():
    model = RecursiveLeastSquares(2)
    with pytest.raises(ValueError):
        model.update([1.0, 2.0, 3.0], 1.0)
    with pytest.raises(ValueError):
        model.update([1.0, math.nan], 1.0)
    with pytest.raises(ValueError):
        model.update([1.0, 1.0], math.inf)
    with pytest.raises(ValueError):
        RecursiveLeastSquares(2, forgetting=1.5)


# -- ALP ------------------------------------------------------------------------------
# A synthetic backend: linear layers cost 4 ms + 40 us per token, never under 8 ms (the weight reads).
A0, A1, FLOOR = 0.004, 4e-5, 0.008


def alp(profiled: list[int] | None = None, **changes: object) -> PredictiveChunkController:
    config = ServingConfig.of(pp=2, chunk=2048, slo_tpot_s=0.1, slo_tpot_coeff=1.0).replace(**changes)

    def decode_stage_time(n: int) -> float:
        if profiled is not None:
            profiled.append(n)
        return max(A0 + A1 * n, FLOOR)

    return PredictiveChunkController(
        pp=config.parallelism.pp,
        scheduling=config.scheduling,
        settings=config.fastpp,
        decode_stage_time=decode_stage_time,
    )


def test_alp_profiles_the_linear_layers_by_running_decode_only_batches():
    profiled: list[int] = []
    c = alp(profiled)
    assert set(range(128, 2049, 128)) <= set(profiled) and 1 in profiled
    assert max(profiled) >= 2048 + 256  # a step holds its chunk and up to max_running decodes
    assert c.linear(10) == pytest.approx(FLOOR) and c.linear(1000) == pytest.approx(A0 + A1 * 1000)
    assert c.linear(1000) == pytest.approx(decode_time(1000))  # the table follows the probe, floor included


def decode_time(n: int) -> float:
    return max(A0 + A1 * n, FLOOR)


def round_of(c: PredictiveChunkController, step: StepReport) -> None:
    """Complete one pipeline round (pp steps) of this step: the controller decides at its end."""
    for _ in range(c.pp):
        c.observe(step)


def test_alp_mape_compares_the_prediction_made_before_the_update():
    c = alp()
    assert math.isnan(c.mape)
    c.observe(report(prefill_tokens=1000, stage_s=2 * (A0 + A1 * 1000), chunk_sq=1e6))
    assert c.mape == pytest.approx(50.0)  # the untrained model predicted the linear part alone


def test_alp_learns_the_attention_terms_online():
    rng = np.random.default_rng(3)
    truth = np.array([2e-9, 1e-9, 5e-8])  # seconds per chunk x prefix, per chunk^2, per decode context token
    c = alp()

    def step(prefill: int, prefix: int, decodes: int, context: float) -> StepReport:
        attention = np.array([prefill * prefix, prefill * prefill, decodes * context])
        stage = max(A0 + A1 * (prefill + decodes), FLOOR) + attention @ truth + (0.001 if prefill else 0.0)
        return report(
            prefill_tokens=prefill,
            decode_tokens=decodes,
            chunk_prefix=attention[0],
            chunk_sq=attention[1],
            decode_context=attention[2],
            stage_s=stage,
        )

    for _ in range(400):
        prefill = int(rng.choice([0, 128, 512, 1024, 2048]))
        c.observe(step(prefill, int(rng.integers(0, 30000)), int(rng.integers(1, 200)), float(rng.uniform(100, 4000))))
    print(f"\nALP MAPE over 400 scripted steps, learning from scratch: {c.mape:.3f}%")
    assert c.mape < 5
    held_out = step(1024, 20000, 64, 3000.0)
    predicted = c.predict(1024, 64, held_out.chunk_prefix, held_out.chunk_sq, held_out.decode_context)
    assert predicted == pytest.approx(held_out.stage_s, rel=0.01)


# With pp 2 and a 0.1 s TPOT budget a stage may take 50 ms: budgets up to 1024 keep TPOT
# (4 + 0.04 x 1024 = 45 ms), 1152 does not. Prefill throughput c / stage(c): 128 -> 14.0K,
# 256 -> 18.0K, 384 -> 19.8K, 512 -> 20.9K, 1024 -> 22.8K, 2048 -> 23.8K tokens/s.
def test_alp_picks_the_smallest_chunk_meeting_tpot_and_demand():
    c = alp()
    assert c.chunk == 128  # nothing known: no demand
    round_of(c, report(stage_s=A0 + A1 * 128, prefill_tokens=128, backlog_tokens=190_000))  # 19K tokens/s
    assert c.chunk == 384
    round_of(c, report(stage_s=FLOOR, decode_tokens=1, backlog_tokens=0))
    assert c.chunk == 128


def test_alp_keeps_its_chunk_through_a_pipeline_round():
    c = alp()  # pp 2
    c.observe(report(stage_s=A0 + A1 * 128, prefill_tokens=128, backlog_tokens=190_000))
    assert c.chunk == 128  # mid-round: the round's second micro-batch gets the same budget
    c.observe(report(stage_s=A0 + A1 * 128, prefill_tokens=128, backlog_tokens=190_000))
    assert c.history == [128, 128, 384]


def test_alp_counts_arrivals_over_its_window_as_demand():
    c = alp()
    for t in range(11):  # two requests of 1000 tokens a second, each prefilled at once
        c.observe(report(finished_at=float(t), stage_s=A0 + A1 * 2000, prefill_tokens=2000, arrived=2 * t))
    assert c.demand() == pytest.approx(2000.0)
    assert c.chunk == 128
    c.observe(report(finished_at=10.5, stage_s=A0 + A1 * 2000, prefill_tokens=2000, arrived=22, backlog_tokens=90_000))
    # the window now starts at t = 1: 20 arrivals, 20K of their tokens prefilled, 90K queued
    assert c.demand() == pytest.approx((20_000 + 90_000) / 9.5 + 90_000 / 10)
    assert c.chunk == 512  # 20.6K tokens/s wanted
    c.observe(report(finished_at=21.0, stage_s=FLOOR, decode_tokens=1, arrived=22))
    assert c.demand() == 0.0  # the window slid past every arrival


def test_alp_asks_only_for_what_admission_lets_in_while_it_is_blocked():
    def window(admissible: int) -> PredictiveChunkController:
        c = alp()
        for t in range(12):  # 2 arrivals a second, 150K tokens queued, 1500 prompt tokens a second finishing
            c.observe(
                report(
                    finished_at=float(t),
                    stage_s=A0 + A1 * 2000,
                    prefill_tokens=2000,
                    arrived=2 * t,
                    backlog_tokens=150_000,
                    admissible_tokens=admissible,
                    finished_prompt_tokens=1500 * t,
                )
            )
        return c

    blocked, free = window(admissible=6_000), window(admissible=150_000)
    assert blocked.demand() == pytest.approx(15_000 / 10 + 6_000 / 10)  # what finished + what fits, not arrivals
    assert free.demand() == pytest.approx(2_000 + 150_000 / 10)  # arrivals' prompts + the whole backlog
    assert blocked.chunk == 128 and free.chunk == 256  # 17K tokens/s wanted: 256 gives 18K, 128 only 14K


def test_alp_leaves_the_decodes_their_share_of_the_budget():
    c = alp()
    round_of(
        c,
        report(
            stage_s=A0 + A1 * 228, prefill_tokens=128, decode_tokens=100, decode_context=1e5, backlog_tokens=190_000
        ),
    )
    assert c.chunk == 768  # 668 prefill tokens / 34.7 ms = 19.2K tokens/s; 640 gives 18.2K


def test_alp_falls_back_to_the_largest_chunk_keeping_tpot():
    c = alp()
    round_of(c, report(stage_s=A0 + A1 * 128, prefill_tokens=128, backlog_tokens=230_000))  # 23K > 22.8K at 1024
    assert c.chunk == 1024


def test_alp_takes_the_smallest_chunk_when_none_keeps_tpot():
    c = alp(slo_tpot_s=0.015)  # 7.5 ms a stage, less than the 9.1 ms of 128 tokens
    round_of(c, report(stage_s=A0 + A1 * 128, prefill_tokens=128, backlog_tokens=10_000))
    assert c.chunk == 128 and c.history == [128, 128, 128]


# -- the modes, end to end --------------------------------------------------------------
@pytest.mark.parametrize("mode", ["fastpp-greedy", "fastpp-alp"])
def test_fastpp_modes_are_registered_like_sglang_pp(mode):
    spec = MODES[mode]
    fields = {f.name for f in dataclasses.fields(FastPPSettings)}  # the knobs of FastPP's own part
    assert (spec.layout, spec.sync_transfers, spec.extra_in_flight, spec.entry_first) == ("linear", False, 0, False)
    own = {k.field for k in declared_knobs() if k.modes and k.applies_to(mode)}
    assert "FastPP" in spec.summary and own and own <= fields


@pytest.fixture
def controllers(monkeypatch):
    """The chunk policy each fastpp mode builds, kept for inspection."""
    built: dict[str, object] = {}
    for mode in ("fastpp-greedy", "fastpp-alp"):
        spec = MODES[mode]

        def keep(env: PolicyEnv, make=spec.chunk_policy, mode=mode) -> object:
            built[mode] = make(env)
            return built[mode]

        monkeypatch.setitem(MODES, mode, dataclasses.replace(spec, chunk_policy=keep))
    return built


@pytest.mark.parametrize("mode", ["fastpp-greedy", "fastpp-alp"])
def test_fastpp_end_to_end_on_azure_conv(mode, controllers):
    config = ServingConfig.of(model="qwen2.5-32b", hardware="a100-40g-pcie", tp=1, pp=4, mode=mode, chunk=2048)
    result = SimBackend().run(load_scenario("azure-conv"), config, rate=8, num_requests=200, timeline=False)
    assert len(result.records) == 200 and all(r.finish_s >= r.first_token_s > 0 for r in result.records)
    history = controllers[mode].history
    assert len(set(history)) > 1
    assert all(128 <= chunk <= 2048 and chunk % 128 == 0 for chunk in history)
    if mode == "fastpp-alp":
        mape = controllers[mode].mape
        print(
            f"\nALP stage-latency MAPE on azure-conv, qwen2.5-32b, 4 x A100 PCIe, rate 8: {mape:.3f}% "
            f"over {len(history) - 1} steps"
        )
        assert math.isfinite(mape) and mape < 5
