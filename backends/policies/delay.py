"""Delay scheduling (FastPP's batch rebalancing): even out decode micro-batches.

With pp micro-batches in flight, the running requests split into pp decode
groups whose sizes drift apart, and a group just past a matmul tile boundary
(130 against 128) pays for a whole extra tile. Before each step the policy
looks at the requests ready to decode and may hold some back for a later
micro-batch:

- only while the system is decode-bound: at most `waiting_tok_threshold`
  prompt tokens waiting to be prefilled;
- a group that exceeds a multiple of `base_unit` by at most
  `load_alpha x base_unit` drops the excess (back onto the tile boundary);
- otherwise a group larger than the mean group size (running decodes / pp)
  is cut toward the mean, delaying at most load_alpha of it;
- whom to delay: `tpot_first` delays the requests with the most TPOT slack,
  `e2e_first` the newest (the oldest finish and free KV sooner), `auto`
  switches to tpot_first once the observed TPOT reaches 0.9 x the SLO.

Held-back requests stay first in line and are never held two steps in a
row, so they join the next micro-batch (resume when room appears); none is
ever dropped or duplicated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

from ..parts import DelaySettings


class DecodeView(Protocol):
    """What the policy reads of a request ready to decode."""

    seq: int  # admission order
    emitted: int  # tokens out so far
    first_token: float
    last_token: float


R = TypeVar("R", bound=DecodeView)
AUTO_SWITCH = 0.9  # auto: tpot_first once observed TPOT reaches this x the SLO


class DelayScheduler:
    """Chooses which ready decodes join the next micro-batch."""

    def __init__(self, *, pp: int, slo_tpot_s: float, settings: DelaySettings):
        self.pp, self.slo_tpot_s = pp, slo_tpot_s
        s = settings
        self.waiting_tok_threshold, self.load_alpha, self.base_unit = s.waiting_tok_threshold, s.load_alpha, s.base_unit
        self.mode = s.delay_mode
        self.delayed = 0  # requests held back so far (each time one is held)
        self._held: set[int] = set()  # seq of the requests held back last step

    def split(self, ready: Sequence[R], decoding: int, backlog_tokens: int, now: float) -> tuple[list[R], list[R]]:
        """Divide the requests ready to decode into those that go now and those held back."""
        n = len(ready)
        held_before, self._held = self._held, set()
        if n <= 1 or backlog_tokens > self.waiting_tok_threshold:
            return list(ready), []
        over = n % self.base_unit
        if n > self.base_unit and over <= self.load_alpha * self.base_unit:
            hold = over
        else:  # toward the mean group size, delaying at most load_alpha of the group
            hold = min(n - math.ceil(decoding / self.pp), int(self.load_alpha * n))
        again = [q for q in ready if q.seq in held_before]  # waited once already: they go now
        hold = min(hold, n - len(again))
        if hold <= 0:
            return list(ready), []
        ordered = again + self._order([q for q in ready if q.seq not in held_before], now)
        later = ordered[n - hold :]
        self._held = {q.seq for q in later}
        self.delayed += hold
        return ordered[: n - hold], later

    def _order(self, ready: Sequence[R], now: float) -> list[R]:
        """`ready` reordered so the requests to delay come last."""
        tpots = [self._tpot(q, now) for q in ready]
        mode = self.mode
        if mode == "auto":
            observed = sum(tpots) / len(tpots)
            mode = "tpot_first" if observed >= AUTO_SWITCH * self.slo_tpot_s else "e2e_first"
        if mode == "tpot_first":  # least slack first, most slack last: they can best afford to wait
            return [q for _, q in sorted(zip(tpots, ready), key=lambda pair: pair[0], reverse=True)]
        return sorted(ready, key=lambda q: q.seq)  # newest last

    @staticmethod
    def _tpot(q: DecodeView, now: float) -> float:
        """The request's TPOT if its next token came out now."""
        return (now - q.first_token) / max(1, q.emitted)
