"""A named, documented recipe for a workload, reproducible from a seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .arrivals import ArrivalProcess
from .errors import check_rate, is_int, require
from .lengths import LengthModel
from .request import Request, Workload

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class Scenario:
    """Length models and an arrival process, with where the numbers come from.

    ``num_requests`` and ``rate`` (requests per second) are the defaults of
    ``workload``; ``rate`` is required for Poisson arrivals, optional for trace
    replay (None replays the recorded times) and must be None otherwise.
    """

    name: str
    description: str
    source: str
    assumptions: str
    prompt: LengthModel
    output: LengthModel
    arrivals: ArrivalProcess
    num_requests: int
    rate: float | None = None

    def __post_init__(self) -> None:
        ok = isinstance(self.name, str) and self.name.strip() != ""
        require(ok, "name", "a non-empty string", self.name)
        _check_num_requests(self.num_requests)
        if self.requires_rate or self.rate is not None:
            self._check_rate(self.rate)

    @property
    def requires_rate(self) -> bool:
        """True when arrival times are drawn at a rate (Poisson), so the rate always matters."""
        return self.arrivals.requires_rate

    @property
    def accepts_rate(self) -> bool:
        """True when ``workload`` takes a rate: Poisson, or trace replay rescaled in time."""
        return self.arrivals.accepts_rate

    @property
    def is_open_loop(self) -> bool:
        """True when requests arrive at their times; False for a closed loop."""
        return self.arrivals.concurrency is None

    def workload(self, seed: int = 0, rate: float | None = None, num_requests: int | None = None) -> Workload:
        """The requests for a seed; the same arguments give the same workload, bit for bit.

        Arrivals, prompt and output lengths draw from separate streams of the
        seed: lengths do not depend on the rate, and for Poisson arrivals rate
        2r gives exactly half the arrival times of rate r.
        """
        n = self.check_arguments(seed, rate, num_requests)
        arrival_rng, prompt_rng, output_rng = _streams(
            seed, (self.arrivals.draws, self.prompt.draws, self.output.draws)
        )
        times = self.arrivals.times(arrival_rng, n, self.rate if rate is None else rate)
        prompts = self.prompt.sample(prompt_rng, n)
        outputs = self.output.sample(output_rng, n)
        rows = zip(times, prompts, outputs, strict=True)
        requests = tuple(Request(i, *row) for i, row in enumerate(rows))
        return Workload(requests, self.arrivals.concurrency)

    def check_arguments(self, seed: int = 0, rate: float | None = None, num_requests: int | None = None) -> int:
        """Check `workload`'s arguments without drawing anything; the number of requests they ask for."""
        require(is_int(seed) and seed >= 0, "seed", "an integer >= 0", seed)
        n = self.num_requests if num_requests is None else num_requests
        _check_num_requests(n)
        if rate is not None:
            self._check_rate(rate)
        return n

    def _check_rate(self, rate: object) -> None:
        """Check a rate against these arrivals: allowed at all, and positive."""
        process = self.arrivals.process
        require(self.accepts_rate, "rate", f"left unset for {process} arrivals (they take no rate)", rate)
        check_rate(rate)


def _streams(seed: int, draws: tuple[bool, ...]) -> list[np.random.Generator | None]:
    """One independent generator of the seed for each part that draws (None for the others).

    numpy is imported only when some part draws, so replaying a trace never loads it.
    """
    if not any(draws):
        return [None] * len(draws)
    import numpy as np

    streams = np.random.SeedSequence(seed).spawn(len(draws))
    return [np.random.default_rng(s) if d else None for s, d in zip(streams, draws, strict=True)]


def _check_num_requests(n: object) -> None:
    require(is_int(n) and n >= 1, "num_requests", "an integer >= 1", n)
