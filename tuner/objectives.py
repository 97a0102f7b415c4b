"""What a tune can optimise: each objective declared once, with its direction as Optuna's `StudyDirection`.

Everything that depends on whether higher or lower is better (the best of
several values, how much better one is, the wording of a gain) asks the
objective; nothing compares direction names. Stored studies keep the
objective's name (`goodput`); `objective_named` reads it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from optuna.study import StudyDirection

from ..errors import InputError


class ObjectiveError(InputError):
    """An objective name is not one pipedeck knows; the message names it and the allowed ones."""


@dataclass(frozen=True)
class Objective:
    """One objective: how the CLI names it, how it reads, where its value is among a trial's metrics, which way is
    better."""

    name: str  # as --objective takes it and stores keep it
    title: str  # in sentences: "1.33x lower mean TTFT"
    label: str  # an axis or column: the metric with its unit
    metric: str  # the trial metric that is its value
    value_format: str  # a value with its unit
    direction: StudyDirection

    def __reduce__(self) -> tuple[object, tuple[str]]:
        """Unpickled (in a tuner worker process) as the declared objective itself."""
        return objective_named, (self.name,)

    @property
    def maximize(self) -> bool:
        """Whether higher values are better."""
        return self.direction == StudyDirection.MAXIMIZE

    @property
    def direction_name(self) -> str:
        """The direction as Optuna spells it: "maximize" or "minimize"."""
        return self.direction.name.lower()

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b`."""
        return a > b if self.maximize else a < b

    def best(self, values: Iterable[float]) -> float:
        """The best of `values`."""
        return max(values) if self.maximize else min(values)

    def sort_key(self, value: float) -> float:
        """A key that sorts better values first."""
        return -value if self.maximize else value

    def running_best(self, values: np.ndarray) -> np.ndarray:
        """The best value so far at each position."""
        return np.maximum.accumulate(values) if self.maximize else np.minimum.accumulate(values)

    def ratio(self, value: float, other: float) -> float:
        """How many times better `value` is than `other` (above 1 = better, whatever the direction)."""
        return value / other if self.maximize else other / value

    def clearly_better(self, low: float, high: float) -> bool:
        """Whether an interval of differences (this minus the other) lies wholly on the better side of zero."""
        return low > 0 if self.maximize else high < 0

    def better_by(self, ratio: float, *, percent: bool = False) -> str:
        """How a value `ratio` times better than another (see `ratio`) reads: "1.79x higher goodput", "1.33x lower
        mean TTFT"; with `percent`, the change of the value itself: "+79% goodput", "-25% mean TTFT"."""
        if not percent:
            return f"{ratio:.2f}x {'higher' if self.maximize else 'lower'} {self.title}"
        change = (ratio if self.maximize else 1 / ratio) - 1
        return f"{change:+.0%} {self.title}" if abs(change) >= 0.1 else f"{change:+.1%} {self.title}"

    def value_text(self, value: float) -> str:
        """A value with its unit: 7.18 req/s, 1.234 s mean TTFT, 2187 tok/s."""
        return self.value_format.format(value)

    @property
    def unit(self) -> str:
        """What `value_text` puts after the number: req/s, s mean TTFT, tok/s."""
        return self.value_format.partition(" ")[2]


GOODPUT = Objective("goodput", "goodput", "goodput (req/s)", "goodput_rps", "{:.3g} req/s", StudyDirection.MAXIMIZE)
TTFT = Objective("ttft", "mean TTFT", "mean TTFT (s)", "ttft_mean_s", "{:.4g} s mean TTFT", StudyDirection.MINIMIZE)
THROUGHPUT = Objective(
    "throughput", "throughput", "throughput (tok/s)", "throughput_tok_s", "{:.4g} tok/s", StudyDirection.MAXIMIZE
)
OBJECTIVES: Mapping[str, Objective] = {o.name: o for o in (GOODPUT, TTFT, THROUGHPUT)}


def objective_named(name: object) -> Objective:
    """The objective called `name` (an option's or a stored study's text); one-line ObjectiveError otherwise."""
    objective = OBJECTIVES.get(name) if isinstance(name, str) else None
    if objective is None:
        raise ObjectiveError(f"objective: unknown {name!r}; allowed: {', '.join(OBJECTIVES)}")
    return objective
