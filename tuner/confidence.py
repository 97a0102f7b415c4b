"""How sure a goodput is: the same config measured on several arrival traces (seeds).

One seed is one draw of the arrival process, and a config's goodput moves
with it. Measuring a finalist on N seeds gives a mean and a 95% Student-t
interval. The best and the default run on the same seeds, so whether one
beats the other is read from the paired differences, seed by seed: a clear
win when the 95% t-interval of their mean lies wholly on the better side of
zero. Pairing removes what a seed does to both configs alike; the paired
interval is never wider than the two unpaired ones together, so intervals
that do not overlap are always a paired win, and overlapping ones may be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict, cast

import numpy as np

from .objectives import Objective

CONFIDENCE = 0.95


class Interval(TypedDict):
    """A goodput over several seeds as `interval` makes it and a trial's metrics keep it (goodput_ci)."""

    mean: float
    low: float  # the ends of its CONFIDENCE t-interval (the mean itself for one seed)
    high: float
    values: list[float]  # one per seed, in the order of `seeds`
    seeds: list[int]
    confidence: float


def interval(values: Sequence[float], seeds: Sequence[int]) -> Interval:
    """Mean and 95% t-interval of `values` (one per seed); with one value the interval is that value."""
    mean, low, high = _t_interval(values)
    return {
        "mean": mean,
        "low": max(0.0, low),
        "high": high,
        "values": [float(v) for v in values],
        "seeds": list(seeds),
        "confidence": CONFIDENCE,
    }


def stored_interval(metrics: Mapping[str, object]) -> Interval | None:
    """The interval a trial's metrics keep as goodput_ci (where `tune --repeats` measured one), else None."""
    ci = metrics.get("goodput_ci")
    return cast(Interval, ci) if isinstance(ci, Mapping) else None  # JSON of what `interval` made


def _t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and the ends of its 95% Student-t interval (the mean itself for one value)."""
    from scipy import stats  # imported here: only a tune with --repeats pays for it

    data = np.asarray(values, dtype=float)
    mean = float(data.mean())
    if data.size < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, data.size - 1) * data.std(ddof=1) / np.sqrt(data.size))
    return mean, mean - half, mean + half


def paired_difference(best: Interval | None, default: Interval | None) -> dict[str, float] | None:
    """Mean and 95% t-interval of best - default over the seeds both were measured on; None under two such seeds."""
    if not best or not default:
        return None
    theirs = dict(zip(default["seeds"], default["values"]))
    differences = [
        float(value) - float(theirs[seed]) for seed, value in zip(best["seeds"], best["values"]) if seed in theirs
    ]
    if len(differences) < 2:
        return None
    mean, low, high = _t_interval(differences)
    return {"mean": mean, "low": low, "high": high, "seeds": len(differences)}


def clear_win(best: Interval | None, default: Interval | None, objective: Objective) -> bool | None:
    """Whether the best beats the default on their shared seeds (the paired interval excludes zero on the better
    side); None without two shared seeds. `tune` and `report` both decide by it."""
    paired = paired_difference(best, default)
    if paired is None:
        return None
    return objective.clearly_better(paired["low"], paired["high"])


def win_text(best: Interval | None, default: Interval | None, objective: Objective) -> str:
    """The verdict in words, with the paired interval: "a clear win: ...", "not a clear win: ...", or ""."""
    win, paired = clear_win(best, default, objective), paired_difference(best, default)
    if win is None or paired is None:
        return ""
    figures = (
        f"best - default over {paired['seeds']} paired seeds is {paired['mean']:+.3g} req/s "
        f"(95% {paired['low']:+.3g} to {paired['high']:+.3g})"
    )  # intervals are of goodputs
    return f"a clear win: {figures}" if win else f"not a clear win: {figures}, which includes 0"


def interval_text(ci: Interval) -> str:
    """`2.86 req/s (95% 2.80-2.91 over 5 seeds)`."""
    return f"{ci['mean']:.3g} req/s (95% {ci['low']:.3g}-{ci['high']:.3g} over {len(ci['seeds'])} seeds)"
