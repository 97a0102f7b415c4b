"""FastPP's greedy chunk controller: steer the per-step token budget by observed SLO slack.

Every `pp` completed steps (one pass of the micro-batches in flight) the
controller looks at what it observed since its last decision: the TTFTs of
requests whose first token came out and the token gaps of the decodes
(observed TPOT), each summarised by its P90 (nearest rank, the SLO's
percentile), plus the latest step's free KV fraction and running count.
In this order:

1. free KV < kv_free_threshold: reset the chunk to the smallest multiple of
   controller_step above the running-request count (KV pressure first);
2. TPOT > tpot_violation x SLO or TTFT < ttft_low x SLO: shrink one step;
3. TTFT > ttft_high x SLO and TPOT < tpot_safe x SLO: grow one step;
4. otherwise keep.

A condition on a statistic with no samples in the window is false. The chunk
stays within [controller_min_chunk, chunk] and starts at controller_base_chunk.
"""

from __future__ import annotations

from ..parts import FastPPSettings
from .chunking import StepReport


def p90(values: list[float]) -> float | None:
    """Nearest-rank 90th percentile, or None without samples."""
    return sorted(values)[-(-9 * len(values) // 10) - 1] if values else None  # rank ceil(0.9 n)


class GreedyChunkController:
    """FastPP's SLO-feedback controller: every pp steps, reset, shrink, grow or keep the chunk."""

    def __init__(self, *, pp: int, chunk: int, settings: FastPPSettings):
        c = settings
        self.pp, self.step = pp, c.controller_step
        self.high = chunk
        self.low = min(c.controller_min_chunk, chunk)
        self.slo_ttft, self.slo_tpot = c.slo_ttft_s, c.slo_tpot_s
        self.kv_free_threshold = c.kv_free_threshold
        self.tpot_violation, self.tpot_safe = c.tpot_violation, c.tpot_safe
        self.ttft_low, self.ttft_high = c.ttft_low, c.ttft_high
        self.chunk = self._clamp(c.controller_base_chunk)
        self.history = [self.chunk]  # the chunk in force after each decision, the start first
        self._ttfts: list[float] = []
        self._gaps: list[float] = []
        self._steps = 0

    def step_budget(self) -> int:
        return self.chunk

    def request_chunk(self, prefix: int) -> int:
        return self.chunk

    def observe(self, report: StepReport) -> None:
        self._ttfts.extend(report.ttfts)
        self._gaps.extend(report.token_gaps)
        self._steps += 1
        if self._steps < self.pp:
            return
        self.chunk = self._decide(report.kv_free, report.running)
        self.history.append(self.chunk)
        self._ttfts, self._gaps, self._steps = [], [], 0

    def _decide(self, kv_free: float, running: int) -> int:
        """The next chunk from the window's P90 TTFT and TPOT and the current KV state."""
        if kv_free < self.kv_free_threshold:
            return self._clamp((running // self.step + 1) * self.step)
        ttft, tpot = p90(self._ttfts), p90(self._gaps)
        tpot_bad = tpot is not None and tpot > self.tpot_violation * self.slo_tpot
        ttft_slack = ttft is not None and ttft < self.ttft_low * self.slo_ttft
        if tpot_bad or ttft_slack:
            return self._clamp(self.chunk - self.step)
        ttft_late = ttft is not None and ttft > self.ttft_high * self.slo_ttft
        tpot_ok = tpot is not None and tpot < self.tpot_safe * self.slo_tpot
        if ttft_late and tpot_ok:
            return self._clamp(self.chunk + self.step)
        return self.chunk

    def _clamp(self, chunk: int) -> int:
        return max(self.low, min(self.high, chunk))
