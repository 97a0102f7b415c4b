"""The mean and percentiles of a run's latencies: the one percentile every summary, table, plot and SLO check reads."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def stats(values: Iterable[float | None]) -> dict[str, float] | None:
    """Mean and percentiles of `values` (None and NaN left out); None when there are none (nothing measured is not 0).

    Percentiles interpolate linearly between the closest ranks, as numpy's default.
    """
    measured = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if not measured:
        return None
    mean = sum(measured) / len(measured)  # not fmean: it refuses -inf + inf, where this (like numpy) gives NaN
    return {"mean": mean, **{f"p{q}": percentile(measured, q) for q in (50, 90, 99)}}


def percentile(ordered: Sequence[float], pct: float) -> float:
    """The pct-th percentile (0 < pct < 100) of sorted values, between the two closest ranks.

    pipedeck's one percentile: the summaries, the trials' metrics and the SLO
    verdict all read it. For whole pct it is statistics.quantiles(n=100,
    method="inclusive")'s arithmetic, so the same float (that module and the
    fractions and decimal it loads would cost every command a few milliseconds).
    """
    if len(ordered) == 1:
        return ordered[0]
    rank, fraction = divmod(pct * (len(ordered) - 1), 100)
    rank = int(rank)
    return (ordered[rank] * (100 - fraction) + ordered[rank + 1] * fraction) / 100
