"""The engine's schedules under the linear chunk-cost law of domain.md section 3."""

from pytest import approx

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


def test_vpp_packs_three_chunks_into_a_window_of_nine():
    """N = 8, t = 1: the drain window is 9; chunks of cost 1 + 2 + 3 = 6 fit, the fourth (4) does not."""
    engine, spans = run_toy("vpp", [N, N])
    rank0 = compute_spans(spans, 0)
    last_exit = next(s for s in rank0 if s.request == 0 and s.stage == 3 and s.chunk == N - 1)
    prev_exit = next(s for s in rank0 if s.request == 0 and s.stage == 3 and s.chunk == N - 2)
    assert last_exit.start - prev_exit.end == approx(9.0)  # the window the entry rank would idle
    packed = [s for s in rank0 if s.request == 1 and s.stage == 0 and s.start < last_exit.start]
    assert [s.chunk for s in packed] == [0, 1, 2]
    assert all(prev_exit.end <= s.start and s.end <= last_exit.start for s in packed)


def test_packing_never_delays_the_draining_request():
    plain, _ = run_toy("vpp-async", [N, N])
    packed, _ = run_toy("vpp", [N, N])
    first = {r.id: r.first_token_s for r in plain.records}
    first_packed = {r.id: r.first_token_s for r in packed.records}
    assert first_packed[0] == approx(first[0])
    assert first_packed[1] < first[1]
