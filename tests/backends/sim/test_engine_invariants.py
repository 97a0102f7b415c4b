"""Invariants every simulated run must keep, in every mode, on real cost models."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from functools import cache
from typing import NamedTuple
from unittest.mock import patch

import pytest

from pipedeck.backends import TRANSFER_KINDS, ConfigError, RunCancelled, RunObserver, ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.backends.sim import backend as sim_backend
from pipedeck.scenarios import load_scenario
from tests.emissions import check_tokens, trace

MODES = ("cpp", "dcpp", "vpp-sync", "vpp-async", "vpp")
ASYNC_MODES = ("vpp-async", "vpp")  # transfers queue on the link and overlap with compute
QWEN = dict(model="qwen2.5-14b", hardware="a100-40g-pcie")
REQUEST = 4096 + 128  # KV tokens one short-4k request reserves


def simulate(
    scenario: str, num_requests: int | None = None, observer=None, seed: int = 0, rate: float | None = None, **config
):
    return SimBackend().run(
        load_scenario(scenario),
        ServingConfig.of(**config),
        seed=seed,
        rate=rate,
        num_requests=num_requests,
        observer=observer,
    )


class Run(NamedTuple):
    scenario: str
    requests: int | None
    tp: int = 2
    pp: int = 2
    qwen: bool = True
    rate: float | None = None

    def workload(self):
        return load_scenario(self.scenario).workload(seed=0, rate=self.rate, num_requests=self.requests)


@cache
def traced(run: Run, mode: str):
    """The run's result and the log of what its engine emitted (tests/emissions.py)."""
    logs, real = [], sim_backend.build_engine

    def build_engine(*args, **kwargs):
        engine = real(*args, **kwargs)
        logs.append(trace(engine))
        return engine

    with patch.object(sim_backend, "build_engine", build_engine):
        result = simulate(
            run.scenario, run.requests, mode=mode, tp=run.tp, pp=run.pp, rate=run.rate, **(QWEN if run.qwen else {})
        )
    (log,) = logs
    return result, log


def cached(scenario: str, num_requests: int | None, mode: str, tp: int = 2, pp: int = 2, qwen: bool = True):
    return traced(Run(scenario, num_requests, tp, pp, qwen), mode)[0]


SPARSE = Run("azure-conv", 12, rate=0.05)  # about 20 s between requests: the pipeline empties in between
CLOSED = Run("mixed-gsm8k", 40, tp=4)  # closed loop, 16 in flight: arrivals are earlier requests' finishes
RUNS = [
    Run("short-4k", 8),
    Run("azure-conv", 40),
    Run("long-64k", None, tp=8, qwen=False),
    SPARSE,
    CLOSED,
]
RUN_IDS = ["short-4k", "azure-conv", "long-64k-dsv3", "azure-conv-sparse", "mixed-gsm8k-closed"]


def max_overlap(intervals) -> int:
    """Most intervals open at once; an interval ending at t is closed before one starting at t opens."""
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def compute_spans(result):
    return [s for s in result.spans if s.kind not in TRANSFER_KINDS]


# -- per-request records ---------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_every_request_gets_exactly_its_tokens_once(mode, run):
    """Counted from the tokens the engine emitted, against the workload's specs, not the records' copies."""
    result, log = traced(run, mode)
    workload = run.workload()
    stages = run.pp * (2 if mode.startswith("vpp") else 1)
    exits = {s.end for s in compute_spans(result) if s.stage == stages - 1}
    check_tokens(log, result.records, workload.requests, result.preemptions, exits)
    assert [r.id for r in result.records] == sorted(q.id for q in workload.requests)  # listed by id
    if workload.concurrency is None:  # open loop: the engine serves requests when the workload sends them
        assert [r.arrival_s for r in result.records] == [q.arrival_s for q in workload.requests]
    # the run ends when the last micro-batch leaves the last stage, with the last token out
    assert result.makespan_s == max(s.end for s in result.spans) == max(t.time for t in log.tokens)


def test_observer_sees_every_request_once_and_snapshots():
    class Recorder(RunObserver):
        def __init__(self):
            self.done, self.snaps, self.spans = [], [], 0

        def request_done(self, record):
            self.done.append(record)

        def snapshot(self, snap):
            self.snaps.append(snap)

        def span(self, span):
            self.spans += 1

    obs = Recorder()
    result = simulate("azure-conv", 40, observer=obs, mode="vpp", tp=2, pp=2, **QWEN)
    assert sorted(r.id for r in obs.done) == list(range(40))
    assert sorted(obs.done) == sorted(result.records)
    assert len(obs.snaps) >= 2
    times = [s.time_s for s in obs.snaps]
    assert times == sorted(times) and times[-1] <= result.makespan_s
    assert [s.done for s in obs.snaps] == sorted(s.done for s in obs.snaps)
    assert all(0 <= s.kv_used <= 1 and s.running >= 0 and s.waiting >= 0 for s in obs.snaps)
    assert obs.spans == len(result.spans)


def test_observer_should_stop_cancels_the_run():
    class Stopper(RunObserver):
        asked = 0

        def should_stop(self):
            self.asked += 1
            return True

    stopper = Stopper()
    with pytest.raises(RunCancelled):
        simulate("azure-conv", 40, observer=stopper, mode="cpp", tp=2, pp=2, **QWEN)
    assert stopper.asked == 1


def test_observer_that_never_stops_changes_nothing():
    plain = cached("azure-conv", 40, "vpp-async")
    observed = simulate("azure-conv", 40, observer=RunObserver(), mode="vpp-async", tp=2, pp=2, **QWEN)
    assert observed.records == plain.records and observed.spans == plain.spans


# -- determinism and sensitivity ------------------------------------------------------


def test_same_inputs_same_result_bit_for_bit():
    a = simulate("azure-conv", 40, seed=5, mode="dcpp", tp=2, pp=2, **QWEN)
    b = simulate("azure-conv", 40, seed=5, mode="dcpp", tp=2, pp=2, **QWEN)
    assert a.records == b.records and a.spans == b.spans and a.ranks == b.ranks


def test_more_pipeline_stages_on_the_same_devices_change_results():
    runs = {(tp, pp): cached("azure-conv", 40, "cpp", tp, pp) for tp, pp in ((4, 1), (2, 2), (1, 4))}
    assert [len(r.ranks) for r in runs.values()] == [1, 2, 4]
    assert [len(r.config["layer_split"]) for r in runs.values()] == [1, 2, 4]
    makespans = {r.makespan_s for r in runs.values()}
    ttfts = {r.summary()["ttft_s"]["mean"] for r in runs.values()}
    assert len(makespans) == 3 and len(ttfts) == 3
    assert {s.rank for s in runs[(1, 4)].spans} == {0, 1, 2, 3}


# -- KV capacity ---------------------------------------------------------------------------


def test_kv_capacity_smaller_than_one_request_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        simulate("short-4k", 8, mode="cpp", tp=2, pp=2, kv_capacity=REQUEST - 1, **QWEN)
    assert str(err.value).startswith(
        f"kv_capacity: request 0 needs {REQUEST} tokens of KV cache but the cluster holds {REQUEST - 1}"
    )


class Snapshots(RunObserver):
    def __init__(self):
        self.snaps = []

    def snapshot(self, snap):
        self.snaps.append(snap)


@pytest.mark.parametrize("fits", [1, 2])
@pytest.mark.parametrize("mode", ["cpp", "vpp"])
def test_tiny_kv_capacity_serialises_requests(mode, fits):
    obs = Snapshots()
    capacity = fits * REQUEST + REQUEST - 1  # room for `fits` requests, not one more
    result = simulate("short-4k", 8, observer=obs, mode=mode, tp=2, pp=2, kv_capacity=capacity, **QWEN)
    assert sorted(r.id for r in result.records) == list(range(8))
    busy = [(r.first_token_s, r.finish_s) for r in result.records]
    assert max_overlap(busy) == fits
    assert obs.snaps and max(s.running for s in obs.snaps) <= fits
    assert max(s.kv_used for s in obs.snaps) <= fits * REQUEST / capacity + 1e-12
    if fits == 1:  # the next prompt starts only after the previous request has finished
        by_first = sorted(result.records, key=lambda r: r.first_token_s)
        for prev, nxt in itertools.pairwise(by_first):
            assert nxt.first_token_s > prev.finish_s
    assert result.makespan_s > cached("short-4k", 8, mode).makespan_s


# -- closed loop -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["cpp", "vpp"])
def test_closed_loop_keeps_at_most_16_in_flight(mode):
    result = cached("mixed-gsm8k", 40, mode, 4, 2)
    assert len(result.records) == 40
    intervals = [(r.arrival_s, r.finish_s) for r in result.records]
    assert max_overlap(intervals) == 16
    assert sum(r.arrival_s == 0.0 for r in result.records) == 16
    # every later request is released exactly when an earlier one finishes
    finishes = Counter(r.finish_s for r in result.records)
    for r in result.records:
        if r.arrival_s > 0:
            assert finishes[r.arrival_s] >= 1


# -- time accounting and the timeline -----------------------------------------------------


def idle_intervals(records) -> list[tuple[float, float]]:
    """The stretches of [0, makespan] with no request in the system (none between its arrival and finish).

    This is the engine's idle, "no micro-batch anywhere in the pipeline",
    measured from the records alone. The two agree because
    - a micro-batch in flight holds work (a prompt chunk or a token) of a
      request that has arrived (it was formed after the arrival) and has not
      finished (at the earliest, it finishes when that micro-batch leaves the
      last stage);
    - a request that arrives while nothing is in flight finds every slot
      free and is formed into a micro-batch at that instant (the arrival
      event schedules at its own time; a closed-loop release happens at the
      finish that frees it, and the record's arrival is that release time, so
      closed loops have no idle at all), so "in the system but nothing in
      flight" lasts no time;
    - the scheduler's host overhead per step (step_overhead_ms) delays when
      a micro-batch's first stage starts, not when it is formed; the engine
      counts it in flight from its formation, so that overhead is bubble, as
      it is here (the request has arrived).
    The makespan is the last finish, so there is no idle tail.
    """
    gaps, reach = [], 0.0
    for arrival, finish in sorted((r.arrival_s, r.finish_s) for r in records):
        if arrival > reach:
            gaps.append((reach, arrival))
        reach = max(reach, finish)
    return gaps


def covered(intervals) -> float:
    """Length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_rank_time_matches_the_timeline_and_the_records(mode, run):
    """Each term of RankTime, computed again from the spans and the records instead of the engine's counters.

    - idle: the time no request is in the system (idle_intervals);
    - compute + exposed_comm: the sum of the rank's span durations (compute
      spans include their TP collectives, which RankTime moves to
      exposed_comm; transfer spans are blocked sends, receives, exchanges and
      waits on a transfer still in flight);
    - bubble: the part of [0, makespan] that neither the rank's spans nor the
      idle stretches cover, i.e. makespan - span durations - idle when spans
      neither overlap each other nor fall in an idle stretch.
    """
    result = traced(run, mode)[0]
    makespan = result.makespan_s
    idle = idle_intervals(result.records)
    idle_s = sum(end - start for start, end in idle)
    if run == SPARSE:  # the run meant to exercise idle does
        assert idle_s > 0.5 * makespan
    else:
        assert idle_s == 0.0
    kinds = {s.kind for s in result.spans} & TRANSFER_KINDS
    assert kinds <= ({"wait"} if mode in ASYNC_MODES else {"send", "recv", "exchange"})
    assert [r.rank for r in result.ranks] == list(range(run.pp))
    for rt in result.ranks:
        mine = [s for s in result.spans if s.rank == rt.rank]
        busy = sum(s.end - s.start for s in mine)
        transfers = sum(s.end - s.start for s in mine if s.kind in TRANSFER_KINDS)
        bubble = makespan - covered([(s.start, s.end) for s in mine] + idle)
        assert min(rt.exposed_comm, rt.bubble, rt.idle) >= 0 and rt.compute > 0
        assert rt.idle == pytest.approx(idle_s, rel=1e-6, abs=1e-9)
        assert rt.compute + rt.exposed_comm == pytest.approx(busy, rel=1e-6)
        assert rt.bubble == pytest.approx(bubble, rel=1e-6, abs=1e-9)
        # what exposed_comm holds beyond the transfer spans is TP collectives, part of the compute spans
        collectives = rt.exposed_comm - transfers
        assert 0 < collectives < busy - transfers


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_compute_spans_of_one_rank_never_overlap(mode, run):
    result, pp = traced(run, mode)[0], run.pp
    for rank in range(pp):
        spans = sorted((s for s in compute_spans(result) if s.rank == rank), key=lambda s: s.start)
        assert spans
        for a, b in itertools.pairwise(spans):
            assert b.start >= a.end - 1e-12, (a, b)
        for s in spans:
            assert 0 <= s.start <= s.end <= result.makespan_s


@pytest.mark.parametrize("mode", ["cpp", "dcpp", "vpp-async", "vpp"])
@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_all_spans_of_one_rank_never_overlap(mode, run):
    """Compute and transfer blocks together form one sequence per rank."""
    result, pp = traced(run, mode)[0], run.pp
    for rank in range(pp):
        spans = sorted((s for s in result.spans if s.rank == rank), key=lambda s: (s.start, s.end))
        for a, b in itertools.pairwise(spans):
            assert b.start >= a.end - 1e-12, (a, b)


def test_vpp_sync_transfer_spans_never_overlap():
    result = cached("long-64k", None, "vpp-sync", 8, 2, False)
    for rank in range(2):
        spans = sorted((s for s in result.spans if s.rank == rank), key=lambda s: (s.start, s.end))
        for a, b in itertools.pairwise(spans):
            assert b.start >= a.end - 1e-12, (a, b)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", RUNS, ids=RUN_IDS)
def test_each_virtual_stage_of_each_batch_runs_exactly_once(mode, run):
    result, pp = traced(run, mode)[0], run.pp
    spans = compute_spans(result)
    assert len(spans) == result.stage_executions
    stages = pp * (2 if mode.startswith("vpp") else 1)
    per_batch = defaultdict(list)
    for s in spans:
        per_batch[s.batch].append(s.stage)
    assert len(per_batch) == result.steps
    assert result.stage_executions == result.steps * stages
    for batch, seen in per_batch.items():
        assert sorted(seen) == list(range(stages)), batch
    # a batch runs its stages in order: each starts after the previous one ended
    ordered = defaultdict(list)
    for s in sorted(spans, key=lambda s: s.stage):
        ordered[s.batch].append(s)
    for seq in ordered.values():
        for a, b in itertools.pairwise(seq):
            assert b.start >= a.end - 1e-12


@pytest.mark.parametrize("mode", ["vpp-sync", "vpp-async", "vpp"])
def test_vpp_fold_back_places_stages_on_ranks(mode):
    result = cached("short-4k", 8, mode)
    pairs = {(s.rank, s.stage) for s in compute_spans(result)}
    assert pairs == {(0, 0), (1, 1), (1, 2), (0, 3)}
    assert result.config["layer_split"] == [12, 12, 12, 12]


def test_vpp_fold_back_with_four_ranks():
    result = simulate("short-4k", 8, mode="vpp-async", tp=1, pp=4, **QWEN)
    pairs = {(s.rank, s.stage) for s in compute_spans(result)}
    assert pairs == {(0, 0), (1, 1), (2, 2), (3, 3), (3, 4), (2, 5), (1, 6), (0, 7)}


@pytest.mark.parametrize("mode", ["cpp", "dcpp"])
def test_linear_layout_places_stage_i_on_rank_i(mode):
    result = cached("azure-conv", 40, mode, 1, 4)
    assert {(s.rank, s.stage) for s in compute_spans(result)} == {(i, i) for i in range(4)}


def test_modes_differ_on_a_long_prompt():
    ttft = {m: cached("long-64k", None, m, 8, 2, False).records[0].ttft_s for m in MODES}
    assert ttft["dcpp"] != ttft["cpp"]
    assert ttft["vpp-sync"] != ttft["cpp"]
    assert cached("long-64k", None, "dcpp", 8, 2, False).chunks > cached("long-64k", None, "cpp", 8, 2, False).chunks
