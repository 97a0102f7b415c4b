"""The engine's schedules under the linear chunk-cost law of domain.md section 3."""

import pytest
from pytest import approx

from pipedeck.backends import ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import catalog
from tests.toy import compute_spans, gaps, run_toy

N = 8


def test_cpp_downstream_rank_idles_t_per_chunk():
    _, spans = run_toy("cpp", [N])
    rank1 = compute_spans(spans, 1)
    assert [s.chunk for s in rank1] == list(range(N))
    assert gaps(rank1) == approx([1.0] * (N - 1))
    assert gaps(compute_spans(spans, 0)) == approx([0.0] * (N - 1))


def test_vpp_sync_has_no_idle_between_fill_and_drain():
    _, spans = run_toy("vpp-sync", [N])
    rank1 = compute_spans(spans, 1)
    assert sum(gaps(rank1)) == approx(0.0)
    rank0 = compute_spans(spans, 0)
    last_entry = max(i for i, s in enumerate(rank0) if s.stage == 0)
    assert sum(gaps(rank0[: last_entry + 1])) == approx(0.0)
    assert rank0[0].start == 0.0 and rank1[0].start == approx(1.0)  # the fill is one stage of chunk 0


def test_vpp_balance_walkthrough_k3():
    """While rank1 runs s1 and s2 of chunk 3 (2 * 4 = 8), rank0 runs s3 of chunk 2 (3) and s0 of chunk 4 (5)."""
    for mode in ("vpp-sync", "vpp-async"):
        _, spans = run_toy(mode, [N])
        middle = [s for s in compute_spans(spans, 1) if s.chunk == 3]
        start, end = middle[0].start, middle[-1].end
        assert end - start == approx(8.0)
        inside = [s for s in compute_spans(spans, 0) if s.start >= start - 1e-9 and s.end <= end + 1e-9]
        assert sorted((s.stage, s.chunk, s.end - s.start) for s in inside) == [(0, 4, 5.0), (3, 2, 3.0)]


def test_vpp_async_runs_new_entry_stage_before_old_exit_stage():
    _, spans = run_toy("vpp-async", [N])
    rank0 = [(s.stage, s.chunk) for s in compute_spans(spans, 0)]
    assert rank0.index((0, 4)) < rank0.index((3, 2))
    _, spans = run_toy("vpp-sync", [N])
    rank0 = [(s.stage, s.chunk) for s in compute_spans(spans, 0)]
    assert rank0.index((3, 2)) < rank0.index((0, 4))


def test_two_short_requests_share_a_vpp_micro_batch():
    """Cross-request packing: two half-chunk prompts fill one step under vpp; without packing they take two."""
    packed, spans = run_toy("vpp", [0.5, 0.5])
    assert packed.steps == 1 and packed.sched.chunks == 2
    entry = [s for s in compute_spans(spans, 0) if s.stage == 0]
    assert len(entry) == 1 and entry[0].request == 0  # one micro-batch led by request 0 ...
    assert {r.id: r.first_token_s for r in packed.records}[1] == entry[0].end + 3.0  # ... that emits both tokens
    plain, _ = run_toy("vpp-async", [0.5, 0.5])
    assert plain.steps == 2 and plain.sched.chunks == 2


def test_vpp_keeps_one_extra_micro_batch_in_flight():
    """With pp + 1 micro-batches in flight, rank 0 starts chunk 2 before chunk 0 has left the pipeline."""
    _, spans = run_toy("vpp", [1, 1, 1, 1])
    rank0 = compute_spans(spans, 0)
    exit0 = next(s for s in rank0 if s.request == 0 and s.stage == 3)
    assert [s.request for s in rank0 if s.stage == 0 and s.start < exit0.start] == [0, 1, 2]


def handoffs(spans, rank):
    return [s for s in spans if s.rank == rank and s.kind == "exchange"]


def test_sync_fold_handoff_stalls_both_ranks_and_the_async_order_removes_it():
    """Rank 1 holds the heavy middle stages: under vpp-sync rank 0 blocks in its send until rank 1 reaches the handoff.

    Stage weights 1, 2, 2, 1 and a transfer of 0.25 t: at every fold handoff both
    ranks exchange at once (rank 0 sends chunk k+1 while rank 1 sends chunk k
    back); rank 0 arrived first and waited, blocked, although rank 1 needs
    nothing from it to finish chunk k. VPP-Async sends without blocking.
    """
    cost = dict(weights=(1.0, 2.0, 2.0, 1.0), transfer=0.25)
    sync, sync_spans = run_toy("vpp-sync", [N], **cost)
    rank0, rank1 = handoffs(sync_spans, 0), handoffs(sync_spans, 1)
    assert len(rank1) >= N - 2
    ends0 = {round(s.end, 9): s for s in rank0}
    for s in rank1:
        mine = ends0[round(s.end, 9)]  # the same exchange, seen from rank 0
        assert mine.start < s.start  # rank 0 was there first and stalled
        assert s.end - s.start == approx(0.25)  # rank 1 pays the transfer itself
    stall = sum(s.end - s.start - 0.25 for s in rank0)
    assert stall > N  # rank 0 stalls about one light round per chunk

    async_, async_spans = run_toy("vpp-async", [N], **cost)
    assert not [s for s in async_spans if s.kind in ("send", "recv", "exchange")]
    comm0 = {r.rank: r.exposed_comm for r in async_.rank_times(async_.records[0].finish_s)}[0]
    sync_comm0 = {r.rank: r.exposed_comm for r in sync.rank_times(sync.records[0].finish_s)}[0]
    assert comm0 < sync_comm0 - stall + 1e-9
    assert async_.records[0].first_token_s < sync.records[0].first_token_s


FOLDBACK = ("vpp-sync", "vpp-async", "vpp", "vpp-adaptive")


@pytest.mark.parametrize("scenario", sorted(catalog()))
def test_every_fold_back_mode_serves_every_catalog_scenario(scenario):
    """The fold-back modes are continuous-batching schedulers: any traffic, several requests per micro-batch."""
    workload = catalog()[scenario].workload(seed=0, num_requests=12 if scenario.startswith("long") else 40)
    for mode in FOLDBACK:
        result = SimBackend().run(
            catalog()[scenario],
            ServingConfig.of(mode=mode, chunk=16384),
            seed=0,
            num_requests=len(workload.requests),
            timeline=False,
        )
        assert sorted(r.id for r in result.records) == [r.id for r in workload.requests]
        if len(workload.requests) > 1 and not scenario.startswith("long"):  # micro-batches hold several requests
            assert result.steps < sum(-(-r.prompt_tokens // 16384) + r.output_tokens for r in workload.requests)


@pytest.mark.parametrize("tp, pp", [(4, 4), (2, 8)])
@pytest.mark.parametrize("mode", FOLDBACK)
def test_deep_fold_backs_never_deadlock_on_traffic(mode, tp, pp):
    """Micro-batches formed while others are in flight reorder a rank's program; blocked senders still meet.

    Two ranks blocked sending to each other exchange both ways at once, whatever
    their programs say next (a tuner trial of vpp-sync at pp 4 once stalled here).
    """
    config = ServingConfig.of(tp=tp, pp=pp, mode=mode, chunk=63488, delay_scheduling=True)
    result = SimBackend().run(catalog()["azure-conv"], config, rate=1.0, num_requests=60, timeline=False)
    assert len(result.records) == 60
