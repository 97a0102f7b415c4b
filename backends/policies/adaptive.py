"""vpp-adaptive's chunk policy: fixed chunks until the linear law breaks, then local resizing.

The fold-back balances because, under tau_k = a + b k, the entry rank's work
while the middle rank runs chunk k (tau_{k-1} + tau_{k+1}) equals the middle
rank's 2 tau_k. The policy fits that law on the first `fit_chunks` measured
entry-stage times of a prompt; every later full-size chunk's measured time
is checked against it. Once one deviates by more than `threshold` (relative),
the law no longer holds (e.g. DSA sparse attention stops growing with the
prefix), and each upcoming chunk is sized so that its predicted time is
2 tau_k - tau_{k-1} of the two chunks issued before it, predicted with the
backend's own latency probe. While the law holds the policy is exactly the
fixed chunk of `vpp`.
"""

from __future__ import annotations

from collections.abc import Callable

from ..parts import AdaptiveSettings
from .chunking import ALIGN, FixedChunk, StepReport


class AdaptiveChunk(FixedChunk):
    """Fixed chunks, resized locally once measured stage times leave the linear law."""

    def __init__(self, *, base: int, settings: AdaptiveSettings, stage_time: Callable[[int, int], float]):
        super().__init__(chunk=base)
        self.threshold, self.fit_chunks = settings.adaptive_threshold, settings.adaptive_fit_chunks
        self.stage_time = stage_time
        self.floor = min(base, ALIGN)
        self.resized = 0  # resized chunks of earlier prompts
        self._reset()

    def _reset(self) -> None:
        self.measured: list[tuple[int, float]] = []  # (prefix, entry-stage seconds) of full-size chunks
        self.law: tuple[float, float] | None = None  # tau = law[0] + law[1] * prefix
        self.adapting = False
        self.issued: dict[int, float] = {}  # prefix -> predicted entry-stage time of the chunk issued there
        self.sizes: dict[int, int] = {}  # prefix -> chunk issued there

    def request_chunk(self, prefix: int) -> int:
        if prefix == 0:
            self.resized += sum(size != self.chunk for size in self.sizes.values())
            self._reset()
        chunk = self.chunk
        before = sorted(p for p in self.issued if p < prefix)[-2:]
        if self.adapting and len(before) == 2:
            target = 2 * self.issued[before[1]] - self.issued[before[0]]
            chunk = self._size_for(target, prefix)
        self.issued[prefix] = self.stage_time(chunk, prefix)
        self.sizes[prefix] = chunk
        return chunk

    @property
    def resized_chunks(self) -> int:
        """Chunks issued at a size other than the base, over every prompt so far."""
        return self.resized + sum(size != self.chunk for size in self.sizes.values())

    def _size_for(self, target: float, prefix: int) -> int:
        """The largest 64-aligned chunk up to the base whose predicted time does not exceed `target`."""
        lo, hi = self.floor // ALIGN, self.chunk // ALIGN
        if self.stage_time(hi * ALIGN, prefix) <= target:
            return self.chunk
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.stage_time(mid * ALIGN, prefix) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo * ALIGN

    def observe(self, report: StepReport) -> None:
        lone_full_chunk = report.prefill_tokens == self.chunk and report.chunk_sq == self.chunk * self.chunk
        if self.adapting or report.decode_tokens or not lone_full_chunk:
            return  # only lone full-size chunks measure the law
        prefix = round(report.chunk_prefix / report.prefill_tokens)
        if self.law is None:  # fewer than `fit_chunks` measured yet
            if any(seen == prefix for seen, _ in self.measured):
                return  # an earlier prompt's chunk finishing late: the same point of the law, no new one
            self.measured.append((prefix, report.stage_s))
            if len(self.measured) == self.fit_chunks:
                import numpy as np  # here, not above: the modes without this policy run without numpy

                x, y = np.array(self.measured).T
                slope, intercept = np.polyfit(x, y, 1)
                self.law = (float(intercept), float(slope))
            return
        expected = self.law[0] + self.law[1] * prefix
        if abs(report.stage_s - expected) > self.threshold * expected:
            self.adapting = True
