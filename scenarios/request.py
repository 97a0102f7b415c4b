"""The unit of work every backend serves, and the stream a scenario yields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Request(NamedTuple):
    """One inference request: when it arrives and how long it is (a tuple, as the records it becomes)."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Workload:
    """A concrete request stream, sorted by arrival time.

    Open loop (``concurrency is None``): each request arrives at its
    ``arrival_s``. Closed loop: the first ``concurrency`` requests arrive at
    their ``arrival_s`` and each later one is released when an earlier one
    finishes, in list order; its ``arrival_s`` is then only an ordering hint.
    """

    requests: tuple[Request, ...]
    concurrency: int | None = None

    def __len__(self) -> int:
        return len(self.requests)
