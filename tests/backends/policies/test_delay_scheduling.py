"""Delay scheduling: even decode micro-batches, no request lost or duplicated."""

import numpy as np
import pytest

from pipedeck.backends import ConfigError, ServingConfig
from pipedeck.backends.parts import DelaySettings
from pipedeck.backends.policies.delay import DelayScheduler
from pipedeck.backends.sim.backend import build_engine
from pipedeck.backends.sim.request import SimRequest
from pipedeck.scenarios import load_scenario
from tests.emissions import check_tokens, trace


def decode_heavy_run(delay: bool):
    """cnn-reversed (65 prompt / 883 output tokens) on PP4.

    Returns the engine, each decode micro-batch's size, the workload and the
    log of the tokens the engine emitted (tests/emissions.py).
    """
    config = ServingConfig.of(
        model="qwen2.5-32b", hardware="a100-40g-pcie", tp=1, pp=4, chunk=2048, delay_scheduling=delay
    ).resolve()
    engine = build_engine(config)
    log = trace(engine)
    sizes: list[int] = []
    log.on_formed.append(lambda batch: batch.prefill_tokens or sizes.append(batch.tokens))
    workload = load_scenario("cnn-reversed").workload(seed=0, rate=3.0, num_requests=300)
    engine.run([SimRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests], None)
    return engine, np.array(sizes), workload, log


def spread(sizes: np.ndarray, pp: int = 4) -> float:
    """Mean (max - min) / mean over each run of pp consecutive decode micro-batches (those in flight together)."""
    groups = sizes[: len(sizes) // pp * pp].reshape(-1, pp)
    return float(np.mean((groups.max(1) - groups.min(1)) / np.maximum(groups.mean(1), 1)))


def test_delay_scheduling_evens_in_flight_decode_micro_batches():
    _, plain, _, _ = decode_heavy_run(False)
    engine, delayed, _, _ = decode_heavy_run(True)
    assert engine.sched.delay.delayed > 0
    assert spread(delayed) < 0.5 * spread(plain)


def test_delay_scheduling_never_loses_or_duplicates_a_request():
    """Held-back decodes still get every token, once: counted from what the engine emitted, not its records."""
    engine, _, workload, log = decode_heavy_run(True)
    assert engine.sched.delay.delayed > 0  # requests were held back
    check_tokens(log, engine.records, workload.requests, engine.sched.preemptions)


class Ready:
    def __init__(self, seq: int, emitted: int, first: float):
        self.seq, self.emitted, self.first_token, self.last_token = seq, emitted, first, first


def test_a_group_just_past_a_tile_boundary_drops_the_excess_and_nobody_waits_twice():
    policy = DelayScheduler(pp=2, slo_tpot_s=0.2, settings=DelaySettings(delay_mode="e2e_first"))
    ready = [Ready(i, 10, 0.0) for i in range(130)]
    go, later = policy.split(ready, decoding=260, backlog_tokens=0, now=1.0)
    assert len(go) == 128 and [q.seq for q in later] == [128, 129]  # the newest wait
    go, later = policy.split(later + ready[:128], decoding=260, backlog_tokens=0, now=1.1)
    assert {128, 129} <= {q.seq for q in go}  # held once, never twice in a row


def test_tpot_first_delays_the_requests_with_the_most_slack():
    policy = DelayScheduler(pp=2, slo_tpot_s=0.2, settings=DelaySettings(delay_mode="tpot_first"))
    ready = [Ready(i, 100, first) for i, first in enumerate([0.0] * 64 + [9.0] + [0.0] * 64)]  # seq 64: lowest TPOT
    _, later = policy.split(ready, decoding=258, backlog_tokens=0, now=10.0)
    assert [q.seq for q in later] == [64]


def test_off_while_prompts_wait():
    policy = DelayScheduler(pp=2, slo_tpot_s=0.2, settings=DelaySettings(delay_mode="auto"))
    go, later = policy.split([Ready(i, 1, 0.0) for i in range(130)], decoding=260, backlog_tokens=5000, now=1.0)
    assert len(go) == 130 and later == []


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(delay_mode="fastest"), "delay_mode: must be one of auto, tpot_first, e2e_first, got 'fastest'"),
        (dict(load_alpha=-0.1), "load_alpha: must be a non-negative number, got -0.1"),
        (dict(base_unit=0), "base_unit: must be a positive integer, got 0"),
        (dict(delay_scheduling="maybe"), "delay_scheduling: must be on or off, got 'maybe'"),
        (dict(rls_forgetting=1.5), "rls_forgetting: must be in (0, 1], got 1.5"),
        (dict(kv_free_threshold=2), "kv_free_threshold: must be in [0, 1], got 2"),
        (dict(controller_step=0), "controller_step: must be a positive token count, got 0"),
    ],
)
def test_new_knobs_are_validated_with_one_line(changes, message):
    with pytest.raises(ConfigError) as err:
        ServingConfig.of(**changes).resolve()
    assert str(err.value) == message
