"""Arrival processes: when each request of a workload arrives."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, ClassVar, Protocol

from .errors import check_rate, head, is_int, is_number, require

if TYPE_CHECKING:
    import numpy as np


class ArrivalProcess(Protocol):
    """Draws the arrival times of ``n`` requests, sorted, in seconds."""

    process: ClassVar[str]
    requires_rate: ClassVar[bool]  # times are drawn at a rate, so one must be given
    accepts_rate: ClassVar[bool]  # a rate may be given (required or optional)
    draws: ClassVar[bool]  # the times are random: ``times`` needs a generator (else it gets None)

    @property
    def concurrency(self) -> int | None:
        """Closed-loop limit on outstanding requests; None for open loop."""
        ...

    def times(self, rng: np.random.Generator | None, n: int, rate: float | None) -> list[float]:
        """Return ``n`` non-decreasing arrival times."""
        ...


@dataclass(frozen=True, slots=True)
class Poisson:
    """Open loop at a rate; gaps ~ Gamma(burstiness, 1 / (rate * burstiness)).

    burstiness 1 is a Poisson process, below 1 burstier, above 1 more regular
    (as ``vllm bench serve --burstiness``). The first request arrives at t=0.
    Unit-mean gaps are drawn and divided by the rate, so one seed gives the
    same traffic at every rate, scaled in time.
    """

    process: ClassVar[str] = "poisson"
    requires_rate: ClassVar[bool] = True
    accepts_rate: ClassVar[bool] = True
    draws: ClassVar[bool] = True
    concurrency: ClassVar[None] = None
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        ok = is_number(self.burstiness) and self.burstiness > 0
        require(ok, "burstiness", "a positive number", self.burstiness)

    def times(self, rng: np.random.Generator | None, n: int, rate: float | None) -> list[float]:
        """Return arrival times at ``rate`` requests per second."""
        assert rng is not None  # draws is True: the scenario passes a generator
        import numpy as np  # here, not above: a replayed trace needs no numpy

        check_rate(rate)
        gaps = rng.gamma(self.burstiness, 1.0 / self.burstiness, n - 1)
        times: list[float] = (np.concatenate(([0.0], np.cumsum(gaps))) / rate).tolist()
        return times


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """At most ``concurrency`` requests outstanding; the next is released when one finishes."""

    process: ClassVar[str] = "closed-loop"
    requires_rate: ClassVar[bool] = False
    accepts_rate: ClassVar[bool] = False
    draws: ClassVar[bool] = False
    concurrency: int

    def __post_init__(self) -> None:
        ok = is_int(self.concurrency) and self.concurrency >= 1
        require(ok, "concurrency", "an integer >= 1", self.concurrency)

    def times(self, rng: np.random.Generator | None, n: int, rate: float | None) -> list[float]:
        """Return zeros: all requests are queued at t=0 and released by the engine."""
        return [0.0] * n


@dataclass(frozen=True, slots=True)
class AllAtOnce:
    """Open loop with every request arriving at t=0."""

    process: ClassVar[str] = "all-at-once"
    requires_rate: ClassVar[bool] = False
    accepts_rate: ClassVar[bool] = False
    draws: ClassVar[bool] = False
    concurrency: ClassVar[None] = None

    def times(self, rng: np.random.Generator | None, n: int, rate: float | None) -> list[float]:
        """Return zeros."""
        return [0.0] * n


@dataclass(frozen=True, slots=True)
class TraceArrivals:
    """Open loop replaying recorded arrival times (sorted, seconds).

    With a rate, every time is multiplied by (recorded rate / rate), where the
    recorded rate of the first n arrivals is (n - 1) / (last - first).
    """

    process: ClassVar[str] = "trace"
    requires_rate: ClassVar[bool] = False
    accepts_rate: ClassVar[bool] = True
    draws: ClassVar[bool] = False
    concurrency: ClassVar[None] = None
    arrival_s: tuple[float, ...]

    def __post_init__(self) -> None:
        times = self.arrival_s
        ok = len(times) > 0 and all(a <= b for a, b in pairwise(times))
        require(ok, "arrival_s", "a non-empty, non-decreasing list of seconds", times[:5])

    def times(self, rng: np.random.Generator | None, n: int, rate: float | None) -> list[float]:
        """Return the first ``n`` recorded times, rescaled to ``rate`` if given."""
        times = [float(t) for t in head(self.arrival_s, n)]
        if rate is None:
            return times
        span = times[-1] - times[0]
        require(span > 0, "rate", "left unset for a trace whose arrivals are all simultaneous", rate)
        scale = (n - 1) / span / rate
        return [t * scale for t in times]
