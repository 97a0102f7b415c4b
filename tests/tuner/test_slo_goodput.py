"""SLO parsing and the goodput search."""

import math

import numpy as np
import pytest

from pipedeck.backends import RequestRecord, RunResult
from pipedeck.tuner import SLOError, parse_slo
from pipedeck.tuner.goodput import find_goodput


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ttft=2s,tpot=200ms", {"ttft": (2.0, 90.0), "tpot": (0.2, 90.0)}),
        ("tpot=0.2s, ttft=2000ms", {"ttft": (2.0, 90.0), "tpot": (0.2, 90.0)}),
        ("ttft@p99=3s", {"ttft": (3.0, 99.0)}),
        ("TTFT@P99.9=1.5S,tpot@p50=50ms", {"ttft": (1.5, 99.9), "tpot": (0.05, 50.0)}),
    ],
)
def test_slo_accepts(text, expected):
    slo = parse_slo(text)
    assert {limit.metric: (pytest.approx(limit.limit_s), limit.percentile) for limit in slo.limits} == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("ttft=2", "slo: 'ttft=2' needs a unit: s or ms"),
        ("ttft=2h", "slo: 'ttft=2h' needs a unit: s or ms"),
        ("itl=2s", "slo: unknown metric 'itl'; allowed: ttft, tpot"),
        ("ttft=-2s", "slo: ttft limit must be a positive time, got -2s"),
        (
            "ttft=fast",
            "slo: cannot read 'ttft=fast'; expected metric[@pNN]=value with unit s or ms, e.g. ttft=2s,tpot=200ms",
        ),
        ("ttft=0s", "slo: ttft limit must be a positive time, got 0s"),
        ("ttft=2s,ttft=3s", "slo: ttft is given twice"),
        ("ttft@p100=2s", "slo: percentile of ttft must be between 0 and 100 (exclusive), got p100"),
        ("", "slo: empty; give at least one limit such as ttft=2s,tpot=200ms"),
    ],
)
def test_slo_rejects_with_one_line(text, message):
    with pytest.raises(SLOError) as err:
        parse_slo(text)
    assert str(err.value) == message


def test_slo_text_round_trips():
    slo = parse_slo("ttft@p99=3s,tpot=200ms")
    assert parse_slo(slo.text()) == slo


def synthetic(threshold: float, calls: list[float]):
    """A backend whose P90 TTFT crosses 2 s exactly at `threshold` requests/s."""

    def evaluate(rate: float) -> RunResult:
        calls.append(rate)
        ttft = 2.0 * rate / threshold
        records = [RequestRecord(i, 0.0, 100, 10, ttft * (0.5 + i / 18), ttft + 1.0) for i in range(10)]
        return RunResult({}, "synthetic", "test", 0, rate, records, [], 1.0, 1, 1, 1)

    return evaluate


@pytest.mark.parametrize("threshold, start", [(3.7, 1.0), (0.013, 4.0), (250.0, 1.0), (4.0, 4.0)])
def test_goodput_finds_the_threshold_within_two_percent(threshold, start):
    calls: list[float] = []
    # P90 of ttft * (0.5 + i/18) over i < 10 interpolates at i = 8.1: 0.95 ttft, so the SLO holds up to threshold/0.95
    true = threshold / 0.95
    found = find_goodput(synthetic(threshold, calls), parse_slo("ttft=2s"), start)
    assert found.rate <= true < found.upper
    assert found.upper / found.rate - 1 <= 0.02
    assert found.rate == pytest.approx(true, rel=0.02)
    assert not found.pruned and found.evaluations == len(calls)
    assert len(set(calls)) == len(calls)  # no rate run twice (a live run costs its whole workload)


def test_goodput_zero_when_the_slo_never_holds():
    found = find_goodput(synthetic(1e-6, []), parse_slo("ttft=2s"), 1.0)
    assert found.rate == 0.0 and found.result is None


def test_prune_stops_at_once_and_reports_no_goodput():
    calls: list[float] = []
    found = find_goodput(synthetic(3.0, calls), parse_slo("ttft=2s"), 1.0, beat=5.0)
    assert found.pruned and calls == [5.0] and found.upper == 5.0 and found.rate == 0.0
    calls.clear()
    better = find_goodput(synthetic(8.0, calls), parse_slo("ttft=2s"), 1.0, beat=5.0)
    assert not better.pruned and better.rate > 5.0 and calls[0] == 5.0


def test_a_pruned_search_says_how_near_it_came_at_the_rate_it_failed():
    """Every pruned trial fails at the same rate (the best so far); the attainment there tells a near miss from a
    config far off, which is what the tuner reports to Optuna so that TPE can rank pruned trials."""
    slo = parse_slo("ttft=2s")
    near = find_goodput(synthetic(4.5, []), slo, 1.0, beat=5.0)
    far = find_goodput(synthetic(1.0, []), slo, 1.0, beat=5.0)
    assert near.pruned and far.pruned and near.upper == far.upper == 5.0
    # ttft at 5 req/s is 2 s x 5 / threshold x (0.5 + i/18): 2 s or less for i <= 7 (near), for none of them (far)
    assert (near.attainment, far.attainment) == (0.8, 0.0)


def test_attainment_counts_requests_meeting_every_limit():
    records = [RequestRecord(i, 0.0, 10, 3, 1.0 + i, 1.0 + i + 0.4 * (i % 2) * 2) for i in range(4)]
    result = RunResult({}, "s", "t", 0, 1.0, records, [], 1.0, 1, 1, 1)
    slo = parse_slo("ttft=2.5s,tpot=300ms")
    # ttft 1,2,3,4 -> first two pass; tpot 0, 0.4, 0, 0.4 -> odd ones fail
    assert slo.attainment(result) == 0.25
    assert not math.isnan(slo.attainment(result))


def one_token_run(ttfts: list[float], outputs: list[int] | None = None) -> RunResult:
    """Requests with these TTFTs; one output token each unless `outputs` says otherwise (finish 1 s later)."""
    outputs = outputs or [1] * len(ttfts)
    records = [
        RequestRecord(i, 0.0, 10, n, t, t + (1.0 if n > 1 else 0.0)) for i, (t, n) in enumerate(zip(ttfts, outputs))
    ]
    return RunResult({}, "s", "t", 0, 1.0, records, [], 1.0, 1, 1, 1)


def test_one_token_outputs_have_no_tpot_not_a_tpot_of_zero():
    result = one_token_run([1.0, 2.0])
    assert all(r.tpot_s is None for r in result.records)
    assert result.summary()["tpot_s"] is None and result.summary()["ttft_s"]["p50"] == 1.5
    assert np.isnan(result.tpots()).all() and len(result.tpots()) == 2  # aligned with the records


def test_a_request_without_tpot_meets_any_tpot_limit():
    slo = parse_slo("ttft=1.5s,tpot=1ms")
    prefill_only = one_token_run([1.0, 2.0])
    assert slo.attainment(prefill_only) == 0.5  # only the TTFT of the second request misses
    assert slo.undefined(prefill_only) == ("tpot",)
    assert slo.met(one_token_run([1.0, 1.2])) and not slo.met(prefill_only)
    # mixed: the TPOT percentile is over the requests that decode (1 s / 9 tokens = 111 ms: over 1 ms)
    mixed = one_token_run([1.0, 1.0, 1.0], [1, 10, 1])
    assert not slo.met(mixed) and slo.attainment(mixed) == pytest.approx(2 / 3) and slo.undefined(mixed) == ()
    assert parse_slo("tpot=200ms").met(mixed)
