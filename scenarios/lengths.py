"""Token-length models: how many prompt or output tokens each request has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from .errors import head, is_int, is_number, require

if TYPE_CHECKING:
    import numpy as np


class LengthModel(Protocol):
    """Draws ``n`` integer token counts, each >= 1."""

    dist: ClassVar[str]
    draws: ClassVar[bool]  # the counts are random: ``sample`` needs a generator (else it gets None)

    def sample(self, rng: np.random.Generator | None, n: int) -> list[int]:
        """Return ``n`` token counts."""
        ...


def stratified_uniforms(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` uniforms on [0, 1), one in each slice [i/n, (i+1)/n), in random order."""
    return (rng.permutation(n) + rng.random(n)) / n


def _check_tokens(values: tuple[int, ...]) -> None:
    ok = len(values) > 0 and all(is_int(v) and v >= 1 for v in values)
    require(ok, "values", "a non-empty list of integers >= 1", values[:5])


@dataclass(frozen=True, slots=True)
class Fixed:
    """Every request has exactly ``tokens`` tokens."""

    dist: ClassVar[str] = "fixed"
    draws: ClassVar[bool] = False
    tokens: int

    def __post_init__(self) -> None:
        require(is_int(self.tokens) and self.tokens >= 1, "tokens", "an integer >= 1", self.tokens)

    def sample(self, rng: np.random.Generator | None, n: int) -> list[int]:
        """Return ``n`` copies of ``tokens``."""
        return [int(self.tokens)] * n


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Lognormal by median and log-space sigma, rounded and clipped to [min, max].

    ``median`` is exp(mu); before clipping the mean is median * exp(sigma**2 / 2)
    and the p90 is median * exp(1.2816 * sigma). ``max=None`` means no upper clip.
    Draws are stratified, so n draws match the distribution's quantiles to 1/n.
    """

    dist: ClassVar[str] = "lognormal"
    draws: ClassVar[bool] = True
    median: float
    sigma: float
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        median, sigma, low, high = self.median, self.sigma, self.min, self.max
        require(is_number(median) and median > 0, "median", "a positive number", median)
        require(is_number(sigma) and sigma >= 0, "sigma", "a non-negative number", sigma)
        require(is_int(low) and low >= 1, "min", "an integer >= 1", low)
        if high is not None:
            require(is_int(high) and high >= low, "max", f"an integer >= min ({low})", high)

    def sample(self, rng: np.random.Generator | None, n: int) -> list[int]:
        """Return ``n`` stratified, rounded and clipped lognormal draws."""
        assert rng is not None  # draws is True: the scenario passes a generator
        from statistics import NormalDist  # here, not above: a replayed trace needs neither

        import numpy as np

        u = np.clip(stratified_uniforms(rng, n), 1e-15, 1 - 1e-15)  # inv_cdf needs 0 < u < 1
        z = np.fromiter(map(NormalDist().inv_cdf, u), float, n)
        tokens = np.rint(self.median * np.exp(self.sigma * z))
        counts: list[int] = np.clip(tokens, self.min, self.max).astype(np.int64).tolist()
        return counts


@dataclass(frozen=True, slots=True)
class Empirical:
    """Stratified draws with replacement from recorded token counts (a trace's column)."""

    dist: ClassVar[str] = "empirical"
    draws: ClassVar[bool] = True
    values: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_tokens(self.values)

    def sample(self, rng: np.random.Generator | None, n: int) -> list[int]:
        """Return ``n`` values, one from each 1/n-quantile slice of the sorted values."""
        assert rng is not None  # draws is True: the scenario passes a generator
        import numpy as np

        ordered = np.sort(np.asarray(self.values, dtype=np.int64))
        counts: list[int] = ordered[(stratified_uniforms(rng, n) * len(ordered)).astype(np.int64)].tolist()
        return counts


@dataclass(frozen=True, slots=True)
class Replay:
    """The recorded token counts in order: the i-th request gets the i-th value."""

    dist: ClassVar[str] = "replay"
    draws: ClassVar[bool] = False
    values: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_tokens(self.values)

    def sample(self, rng: np.random.Generator | None, n: int) -> list[int]:
        """Return the first ``n`` values."""
        return [int(v) for v in head(self.values, n)]
