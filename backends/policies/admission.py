"""Admission of prefill work: which requests may put prompt chunks into a step.

The scheduler asks before each prefill chunk; the answer is how many tokens
the chunk may have (0 = not now). The lead request is the oldest admitted
one whose prefill has not finished; it drains once all its chunks are issued.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class Admission(Protocol):
    """Gatekeeper for prefill chunks."""

    def allowance(self, is_lead: bool, lead_draining: bool, tokens: int, prefix: int) -> int: ...

    def on_drain(self, last_busy: list[float], prev_busy: list[float] | None, transfer_s: float) -> None: ...


class ContinuousAdmission:
    """Continuous batching: any request may prefill whenever the budget allows."""

    def allowance(self, is_lead: bool, lead_draining: bool, tokens: int, prefix: int) -> int:
        return tokens

    def on_drain(self, last_busy: list[float], prev_busy: list[float] | None, transfer_s: float) -> None:
        pass


class SerialAdmission(ContinuousAdmission):
    """One prompt at a time through the pipeline (vanilla VPP's per-request schedule)."""

    def allowance(self, is_lead: bool, lead_draining: bool, tokens: int, prefix: int) -> int:
        return tokens if is_lead else 0


class DrainPacking(ContinuousAdmission):
    """Pack the next request's leading chunks into the window a draining request leaves.

    When the lead request's last chunk is issued, the entry rank will idle
    while the other ranks finish it: about the middle stages' time of the last
    chunk minus the entry rank's remaining last-stage work of the chunk before.
    The next request's chunks are admitted, earliest (cheapest) first, while
    their predicted entry-stage times fit in that window (they belong to a
    younger request, so ranks run them after the draining request's work).
    """

    def __init__(self, entry_stage_time: Callable[[int, int], float]):
        self.entry_stage_time = entry_stage_time
        self.window = 0.0

    def on_drain(self, last_busy: list[float], prev_busy: list[float] | None, transfer_s: float) -> None:
        middle = sum(last_busy[1:-1]) + transfer_s
        self.window = max(0.0, middle - (prev_busy[-1] if prev_busy else 0.0))

    def allowance(self, is_lead: bool, lead_draining: bool, tokens: int, prefix: int) -> int:
        if is_lead:
            return tokens
        if not lead_draining:
            return 0
        cost = self.entry_stage_time(tokens, prefix)
        if cost > self.window:
            return 0
        self.window -= cost
        return tokens
