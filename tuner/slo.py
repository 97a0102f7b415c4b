"""Service-level objectives: `--slo ttft=2s,tpot=200ms`, percentile limits on TTFT and TPOT.

The text is parsed once where it enters (`parse_slo`: a command-line option,
the console's field, a stored study's settings); everything after takes an
`Slo`. Stores keep `Slo.text()` (Optuna's study settings) and `Slo.to_dict()`
(the run store's studies.slo), and `Slo.from_dict` reads the latter back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import RunResult, percentile
from ..errors import InputError

METRICS = ("ttft", "tpot")
DEFAULT_PERCENTILE = 90.0
_UNITS = {"s": 1.0, "ms": 1e-3}
_ITEM = re.compile(r"^(?P<metric>[a-z_]+)(?:@p(?P<pct>[0-9.]+))?=(?P<value>[-+0-9.eE]+)(?P<unit>[a-z]*)$")


class SLOError(InputError):
    """An SLO text is malformed; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class Limit:
    """P<percentile> of a metric must stay at or below limit_s."""

    metric: str
    limit_s: float
    percentile: float = DEFAULT_PERCENTILE

    @property
    def key(self) -> str:
        """The metric's name at this percentile, as a trial's metrics have it: ttft_p90_s."""
        return f"{self.metric}_p{self.percentile:g}_s"

    def text(self) -> str:
        pct = "" if self.percentile == DEFAULT_PERCENTILE else f"@p{self.percentile:g}"
        value = f"{self.limit_s * 1e3:g}ms" if self.limit_s < 1 else f"{self.limit_s:g}s"
        return f"{self.metric}{pct}={value}"


@dataclass(frozen=True)
class Slo:
    """A set of percentile limits that must all hold."""

    limits: tuple[Limit, ...]

    @classmethod
    def from_dict(cls, limits: Mapping[str, Any]) -> Slo:
        """The SLO a run store keeps as {"ttft": {"limit_s": .., "percentile": ..}, ...} (`to_dict`)."""
        return cls(
            tuple(
                Limit(metric, float(v["limit_s"]), float(v.get("percentile", DEFAULT_PERCENTILE)))
                for metric, v in limits.items()
            )
        )

    def text(self) -> str:
        """The SLO as `parse_slo` reads it and Optuna's study settings keep it: ttft=2s,tpot=200ms."""
        return ",".join(limit.text() for limit in self.limits)

    def to_dict(self) -> dict[str, dict[str, float]]:
        """The SLO as the run store keeps it (`from_dict` reads it back)."""
        return {limit.metric: {"limit_s": limit.limit_s, "percentile": limit.percentile} for limit in self.limits}

    def as_stored(self) -> Slo:
        """The SLO as its stored text reads back (`text` keeps six significant digits): a tune measures by the
        limits a resumed study will read."""
        return parse_slo(self.text())

    def seconds(self) -> dict[str, float]:
        """Each limited metric's limit in seconds: {"ttft": 2.0, "tpot": 0.2}."""
        return {limit.metric: limit.limit_s for limit in self.limits}

    def met(self, result: RunResult) -> bool:
        """True when every limit's percentile over the run's requests is within its bound.

        A live run's failed requests count as missing every limit. The TPOT
        percentile is over the requests that have one: a one-token output
        decodes nothing, and a run of only those meets any TPOT limit.
        """
        return all(
            _percentile(_values(result, limit.metric), limit.percentile) <= limit.limit_s for limit in self.limits
        )

    def attainment(self, result: RunResult) -> float:
        """Fraction of requests that meet every limit themselves (a live run's failed requests do not).

        A request without a TPOT (one output token) meets any TPOT limit, as vLLM's benchmark counts it.
        """
        values = {limit.metric: _values(result, limit.metric) for limit in self.limits}
        count = len(next(iter(values.values())))
        if not count:
            return 0.0
        ok = np.ones(count, dtype=bool)
        for limit in self.limits:
            ok &= ~(values[limit.metric] > limit.limit_s)  # NaN (no TPOT) is never over a limit
        return float(ok.mean())

    def observed(self, result: RunResult) -> dict[str, float]:
        """Each limited percentile as the run measured it, by `Limit.key`."""
        return {limit.key: _percentile(_values(result, limit.metric), limit.percentile) for limit in self.limits}

    def undefined(self, result: RunResult) -> tuple[str, ...]:
        """The limited metrics the run has no value of (TPOT when every output is one token)."""
        return tuple(limit.metric for limit in self.limits if np.isnan(_values(result, limit.metric)).all())


FAILED = float(np.finfo(float).max)  # a failed request's latency: above every limit, finite for percentiles


def _percentile(values: np.ndarray, pct: float) -> float:
    """The percentile of the values that exist (NaN: no TPOT).

    Requests none of which has the metric meet any limit on it (0); no requests at all meet none (inf).
    """
    if not values.size:
        return np.inf
    defined = values[~np.isnan(values)]
    return percentile(sorted(defined.tolist()), pct) if defined.size else 0.0


def _values(result: RunResult, metric: str) -> np.ndarray:
    served = result.ttfts() if metric == "ttft" else result.tpots()
    failed = len(result.live.failed()) if result.live is not None else 0
    return np.concatenate([served, np.full(failed, FAILED)]) if failed else served


def parse_slo(text: str) -> Slo:
    """Parse `ttft=2s,tpot=200ms` (optionally `ttft@p99=3s`); one-line SLOError on anything else."""
    limits: dict[str, Limit] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _ITEM.match(item.lower())
        if not match:
            raise SLOError(
                f"slo: cannot read {item!r}; expected metric[@pNN]=value with unit s or ms, e.g. ttft=2s,tpot=200ms"
            )
        metric, unit = match["metric"], match["unit"]
        if metric not in METRICS:
            raise SLOError(f"slo: unknown metric {metric!r}; allowed: {', '.join(METRICS)}")
        if metric in limits:
            raise SLOError(f"slo: {metric} is given twice")
        if unit not in _UNITS:
            raise SLOError(f"slo: {item!r} needs a unit: s or ms")
        try:
            value = float(match["value"])
        except ValueError:
            raise SLOError(f"slo: {item!r} has no number before its unit") from None
        if not value > 0 or value == float("inf"):
            raise SLOError(f"slo: {metric} limit must be a positive time, got {match['value']}{unit}")
        pct = DEFAULT_PERCENTILE if match["pct"] is None else float(match["pct"])
        if not 0 < pct < 100:
            raise SLOError(f"slo: percentile of {metric} must be between 0 and 100 (exclusive), got p{match['pct']}")
        limits[metric] = Limit(metric, value * _UNITS[unit], pct)
    if not limits:
        raise SLOError("slo: empty; give at least one limit such as ttft=2s,tpot=200ms")
    return Slo(tuple(limits[m] for m in METRICS if m in limits))
