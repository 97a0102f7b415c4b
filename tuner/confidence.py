"""How sure a goodput is: the same config measured on several arrival traces (seeds).

One seed is one draw of the arrival process, and a config's goodput moves
with it. Measuring a finalist on N seeds gives a mean and a 95% Student-t
interval; one config beats another only when their intervals do not overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

CONFIDENCE = 0.95


def interval(values: Sequence[float], seeds: Sequence[int]) -> dict[str, object]:
    """Mean and 95% t-interval of `values` (one per seed); with one value the interval is that value."""
    from scipy import stats  # imported here: only a tune with --repeats pays for it

    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if data.size < 2:
        low = high = mean
    else:
        half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, data.size - 1) * data.std(ddof=1) / np.sqrt(data.size))
        low, high = mean - half, mean + half
    return {"mean": mean, "low": max(0.0, low), "high": high, "values": [float(v) for v in data],
            "seeds": list(seeds), "confidence": CONFIDENCE}


def separated(better: Mapping[str, object] | None, worse: Mapping[str, object] | None, direction: str) -> bool:
    """Whether `better`'s interval lies wholly on the better side of `worse`'s."""
    if not better or not worse:
        return False
    if direction == "maximize":
        return float(better["low"]) > float(worse["high"])
    return float(better["high"]) < float(worse["low"])


def interval_text(ci: Mapping[str, object]) -> str:
    """`2.86 req/s (95% 2.80-2.91 over 5 seeds)`."""
    return f"{ci['mean']:.3g} req/s (95% {ci['low']:.3g}-{ci['high']:.3g} over {len(ci['seeds'])} seeds)"
