"""KV admission with a partial output reserve, and preemption by recompute when the cache fills."""

from __future__ import annotations

import functools
from collections import defaultdict

import pytest

from pipedeck.backends import MODES, ConfigError, ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.backends.sim.backend import build_engine
from pipedeck.backends.sim.request import SimRequest
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore
from tests.backends.sim.test_engine_invariants import max_overlap
from tests.emissions import trace

KV = 40_000  # tokens: about 30 azure-conv requests' prompts, so decodes fill it


def traced_run(output_reserve: float, mode: str = "cpp", requests: int = 120):
    """A KV-tight run; returns the engine, per-request prefill tokens and (id, tokens emitted) per preemption."""
    config = ServingConfig.of(
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        tp=2,
        pp=2,
        chunk=1024,
        mode=mode,
        kv_capacity=KV,
        output_reserve=output_reserve,
    ).resolve()
    engine = build_engine(config)
    sched = engine.sched
    prefilled: dict[int, int] = defaultdict(int)  # prompt tokens issued in chunks, recomputes included
    issued: dict[int, int] = defaultdict(int)  # of the current prefill, as the scheduler counts them
    preempted: list[tuple[int, int]] = []
    peak = [0]

    def formed(batch):
        peak[0] = max(peak[0], sched.kv_used)  # the cache fills only as steps are formed
        for q, _ in batch.entries:  # a chunk of q's prompt, or of its recompute
            prefilled[q.id] += q.scheduled - issued[q.id]
            issued[q.id] = q.scheduled

    def evicted(victim):
        preempted.append((victim.id, victim.emitted))
        issued[victim.id] = 0

    log = trace(engine)
    log.on_formed.append(formed)
    log.on_evicted.append(evicted)
    workload = load_scenario("azure-conv").workload(seed=0, rate=20.0, num_requests=requests)
    originals = {r.id: r for r in workload.requests}
    engine.run([SimRequest(r.id, r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests], None)
    return engine, originals, prefilled, preempted, peak[0]


@functools.cache
def reserve_none(mode: str = "cpp"):
    return traced_run(0.0, mode)


@pytest.fixture(scope="module")
def reserve_all():
    return traced_run(1.0)


def test_reserving_every_output_never_preempts(reserve_all):
    engine, originals, prefilled, preempted, peak = reserve_all
    assert preempted == [] and engine.sched.preemptions == 0
    assert peak <= KV
    assert all(prefilled[i] == r.prompt_tokens for i, r in originals.items())


@pytest.mark.parametrize("mode", list(MODES))
def test_reserving_nothing_preempts_and_recomputes_in_every_mode(mode):
    engine, originals, prefilled, preempted, peak = reserve_none(mode)
    assert preempted and engine.sched.preemptions == len(preempted)
    assert peak <= KV  # the cache never holds more than it has
    recomputed: dict[int, int] = defaultdict(int)
    for rid, emitted in preempted:
        assert emitted >= 1  # only requests past their first token are decoding
        recomputed[rid] += originals[rid].prompt_tokens + emitted
    for rid, r in originals.items():  # each preemption prefills the prompt and the tokens generated so far again
        assert prefilled[rid] == r.prompt_tokens + recomputed[rid]
    records = {r.id: r for r in engine.records}  # every request finishes once, with every token
    assert sorted(records) == sorted(originals) and len(engine.records) == len(originals)
    assert all(records[rid].output_tokens == r.output_tokens for rid, r in originals.items())
    assert engine.sched.kv_used == 0 and engine.sched.running == 0


def test_a_smaller_reserve_admits_more_at_once(reserve_all):
    def peak_running(engine):  # requests between their first token and their finish
        return max_overlap([(r.first_token_s, r.finish_s) for r in engine.records])

    assert peak_running(reserve_none()[0]) > peak_running(reserve_all[0])


@pytest.mark.parametrize("max_running, admitted", [(256, 2), (1, 1)])
def test_admissible_tokens_are_the_prompts_admission_takes_next(max_running, admitted):
    config = ServingConfig.of(
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        pp=2,
        chunk=16_384,
        kv_capacity=10_000,
        output_reserve=0.5,
        max_running=max_running,
    ).resolve()
    sched = build_engine(config).sched
    # claims (prompt + half the output): 3500 and 5000 fit in 10K; 2050 more does not, and the last,
    # small enough to fit, waits behind it
    queue = [
        SimRequest(0, 0.0, 3000, 1000),
        SimRequest(1, 0.0, 4000, 2000),
        SimRequest(2, 0.0, 2000, 100),
        SimRequest(3, 0.0, 10, 1),
    ]
    sched.waiting.extend(queue)
    expected = sum(q.prompt for q in queue[:admitted])
    assert sched.backlog_tokens() == 9010 and sched.admissible_tokens() == expected
    sched.form(0.0)  # a budget larger than every prompt: admission alone decides who enters
    assert sched.running == admitted and list(sched.waiting) == queue[admitted:]
    assert sched.admissible_tokens() == 0 < sched.backlog_tokens()  # their prompts are in flight; nothing more fits


def test_preemptions_are_reported_and_stored(tmp_path):
    config = ServingConfig.of(
        model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2, chunk=1024, kv_capacity=KV, output_reserve=0.0
    )
    result = SimBackend().run(load_scenario("azure-conv"), config, rate=20.0, num_requests=120, timeline=False)
    assert result.preemptions > 0 and result.summary()["preemptions"] == result.preemptions
    with RunStore.open(tmp_path / "runs.duckdb") as store:
        run_id = store.save_run(result)
        assert store.get_run(run_id, timeline=False).result == result


def test_output_reserve_is_validated():
    with pytest.raises(ConfigError) as err:
        ServingConfig.of(output_reserve=1.5).resolve()
    assert str(err.value) == "output_reserve: must be in [0, 1], got 1.5"
