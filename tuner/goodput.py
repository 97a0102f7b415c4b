"""Goodput: the highest Poisson rate at which every SLO percentile holds.

Bracket by doubling or halving from a starting rate, then bisect (in log
space) until the bracket is within the relative precision. Every evaluation
uses the same seed, so all rates see the same traffic scaled in time (common
random numbers) and configs are compared on the same requests. The answer is
the highest rate observed to meet the SLO; the true threshold lies below the
lowest rate observed to fail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..backends import RunResult
from .slo import Slo

MIN_RATE = 1e-3  # requests/s below which a config has goodput 0
MAX_RATE = 1e5


@dataclass(frozen=True)
class Goodput:
    """Outcome of a goodput search."""

    rate: float  # highest rate known to meet the SLO (0 if none)
    upper: float  # lowest rate known to fail (inf if none failed)
    attainment: float  # fraction of requests meeting every limit at `rate` (pruned: at `upper`, where it failed)
    result: RunResult | None  # the run at `rate`
    evaluations: int
    pruned: bool = False  # stopped early: the rate cannot beat `beat`

    @property
    def capped(self) -> bool:
        """The SLO still held at the search's ceiling: the workload is too small to find the goodput."""
        return self.rate > 0 and self.upper == math.inf


def find_goodput(
    evaluate: Callable[[float], RunResult],
    slo: Slo,
    start_rate: float,
    precision: float = 0.02,
    beat: float | None = None,
    max_rate: float = MAX_RATE,
    min_rate: float = MIN_RATE,
) -> Goodput:
    """Search the goodput of one config; with `beat`, stop as soon as it provably cannot exceed it.

    The search never goes above `max_rate`; a config that still meets the SLO
    there comes back `capped` (see `workload_ceiling`). Nor below `min_rate`:
    a config that fails there has goodput 0.
    """
    evaluations = 0

    def met(rate: float) -> tuple[bool, RunResult]:
        nonlocal evaluations
        evaluations += 1
        result = evaluate(rate)
        return slo.met(result), result

    lo, hi, lo_result = 0.0, math.inf, None
    rate = min(beat if beat else start_rate, max_rate)
    ok, result = met(rate)
    if ok:
        lo, lo_result = rate, result
    else:
        hi = rate
        if beat:
            return Goodput(0.0, hi, slo.attainment(result), None, evaluations, pruned=True)
    while ok and rate < max_rate:  # grow until a rate fails
        rate = min(rate * 2, max_rate)
        ok, result = met(rate)
        if ok:
            lo, lo_result = rate, result
        else:
            hi = rate
    while lo_result is None and rate > min_rate:  # nothing passed yet: shrink until a rate does
        rate = max(rate / 2, min_rate)
        ok, result = met(rate)
        if ok:
            lo, lo_result = rate, result
        else:
            hi = rate
    if lo_result is None:
        return Goodput(0.0, hi, 0.0, None, evaluations)
    while hi != math.inf and hi / lo - 1 > precision:
        mid = math.sqrt(lo * hi)
        ok, result = met(mid)
        if ok:
            lo, lo_result = mid, result
        else:
            hi = mid
    return Goodput(lo, hi, slo.attainment(lo_result), lo_result, evaluations)


def workload_ceiling(num_requests: int, slo: Slo) -> float:
    """The highest rate worth searching: beyond it the whole workload arrives within one TTFT limit.

    Faster than that, every request is effectively queued at once and the
    run measures a burst, not a sustained rate; a config that passes there
    has a goodput this workload is too small to find.
    """
    window = max([limit.limit_s for limit in slo.limits if limit.metric == "ttft"] or [1.0])
    return max(MIN_RATE, num_requests / window)
