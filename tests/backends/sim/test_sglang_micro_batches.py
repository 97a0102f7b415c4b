"""SGLang's pipeline scheduler: one running batch per micro-batch slot, and FastPP's rebalancing of them."""

from collections import defaultdict
from functools import cache

import numpy as np
import pytest

from pipedeck.backends import ServingConfig
from pipedeck.backends.config import SGLANG_MIXED_CHUNK
from pipedeck.backends.sim.backend import build_engine
from pipedeck.backends.sim.request import SimRequest
from pipedeck.scenarios import load_scenario
from tests.emissions import check_tokens, trace

CHUNK = 64
PP = 4


@cache
def decode_heavy(
    delay: bool, sticky: bool = True, mixed: bool = True, chunk: int = CHUNK, pp: int = PP, rate: float = 3.0
):
    """cnn-reversed on qwen2.5-14b, PP4; every step's slot and decode ids, and the log of emitted tokens.

    `mixed` off is SGLang's launch without --enable-mixed-chunk: prefill and
    decode steps apart, decodes outside the chunk budget.
    """
    semantics = {**SGLANG_MIXED_CHUNK, "sticky_decodes": sticky, "mixed_batches": mixed, "decode_in_budget": mixed}
    config = ServingConfig.of(
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        tp=4 // pp,
        pp=pp,
        chunk=chunk,
        delay_scheduling=delay,
        **semantics,
    ).resolve()
    engine = build_engine(config)
    steps: list[tuple[int, list[int]]] = []
    emitted = trace(engine)
    emitted.on_formed.append(lambda batch: steps.append((batch.slot, [q.id for q in batch.decoding()])))
    workload = load_scenario("cnn-reversed").workload(seed=0, rate=rate, num_requests=300)
    engine.run([SimRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests], None)
    return engine, steps, emitted, workload


def slots_of_each_request(steps):
    slots = defaultdict(set)
    for slot, ids in steps:
        for rid in ids:
            slots[rid].add(slot)
    return slots


def size_spread(steps) -> float:
    """Mean (largest - smallest) decode count over each round of PP consecutive steps, mid-run."""
    sizes = np.array([len(ids) for _, ids in steps])
    mid = sizes[len(sizes) // 4 : 3 * len(sizes) // 4]
    rounds = mid[: len(mid) // PP * PP].reshape(-1, PP)
    return float(np.mean(rounds.max(1) - rounds.min(1)))


def test_a_request_decodes_in_the_micro_batch_it_joined():
    _, steps, _, _ = decode_heavy(False)
    slots = slots_of_each_request(steps)
    assert len(slots) == 300 and all(len(s) == 1 for s in slots.values())
    assert len({next(iter(s)) for s in slots.values()}) == PP  # every slot holds requests


def test_a_decode_step_takes_its_slots_whole_running_batch_beyond_the_chunk():
    _, steps, _, _ = decode_heavy(False, mixed=False, chunk=16)
    assert max(len(ids) for _, ids in steps) > 16
    assert all(len(s) == 1 for s in slots_of_each_request(steps).values())
    _, vllm_steps, _, _ = decode_heavy(False, sticky=False, chunk=16)  # vLLM: decodes share the chunk budget
    assert max(len(ids) for _, ids in vllm_steps) <= 16
    assert max(len(s) for s in slots_of_each_request(vllm_steps).values()) > 1  # and float between micro-batches


def test_rebalancing_evens_the_slots():
    _, plain, _, _ = decode_heavy(False)
    engine, balanced, _, _ = decode_heavy(True)
    assert engine.sched.delay.delayed > 0
    assert size_spread(balanced) < 0.6 * size_spread(plain)
    assert any(len(s) > 1 for s in slots_of_each_request(balanced).values())  # requests were moved


@pytest.mark.parametrize("pp, rate, mixed", [(PP, 3.0, True), (1, 6.0, False)])
def test_rebalancing_loses_and_duplicates_no_request(pp, rate, mixed):
    """With one micro-batch (pp 1) there is no other slot: held requests wait for the next step of their own."""
    engine, _, emitted, workload = decode_heavy(True, pp=pp, rate=rate, mixed=mixed)
    assert engine.sched.delay.delayed > 0
    check_tokens(emitted, engine.records, workload.requests, engine.sched.preemptions)
