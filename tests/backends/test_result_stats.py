"""`stats`: a run's mean and percentiles, the figures every table, plot and SLO check reads."""

from __future__ import annotations

import math
import random
import statistics

import numpy as np
import pytest

from pipedeck.backends import ServingConfig, percentile
from pipedeck.backends.sim import SimBackend
from pipedeck.backends.stats import stats
from pipedeck.scenarios import load_scenario
from pipedeck.tuner import Limit, Slo


@pytest.mark.parametrize("seed", range(5))
def test_percentiles_are_statistics_quantiles_to_the_last_bit_and_numpy_s_to_rounding(seed):
    rng = random.Random(seed)
    for n in (2, 3, 7, 99, 100, 101, 1000):
        values = [rng.choice((rng.random(), rng.expovariate(1.0) * 1e3, float(rng.randint(0, 5)))) for _ in range(n)]
        got = stats(values)
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        assert (got["p50"], got["p90"], got["p99"]) == (cuts[49], cuts[89], cuts[98])
        assert [got["p50"], got["p90"], got["p99"]] == pytest.approx(np.percentile(values, [50, 90, 99]), rel=1e-12)
        assert got["mean"] == pytest.approx(statistics.fmean(values), rel=1e-12)


def test_one_value_is_every_percentile_and_none_or_nan_are_left_out():
    assert stats([None, 2.5, float("nan")]) == {"mean": 2.5, "p50": 2.5, "p90": 2.5, "p99": 2.5}
    assert stats([None, float("nan")]) is None and stats([]) is None


def test_a_fractional_percentile_interpolates_as_numpy_does():
    values = sorted(random.Random(7).random() for _ in range(1000))
    assert percentile(values, 99.9) == pytest.approx(np.percentile(values, 99.9), rel=1e-12)


def test_the_slo_verdict_reads_the_summary_s_percentile_to_the_last_bit():
    """A TTFT p90 limit equal to the p90 the run reports holds; the float just below it does not."""
    result = SimBackend().run(
        load_scenario("azure-conv"),
        ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2),
        num_requests=300,
        timeline=False,
    )
    p90 = result.summary()["ttft_s"]["p90"]
    assert Slo((Limit("ttft", p90),)).met(result)
    assert not Slo((Limit("ttft", math.nextafter(p90, 0.0)),)).met(result)
