"""Running metrics of a Live run, folded from the backend's progress frames (no UI)."""

from __future__ import annotations

from collections import deque

import numpy as np

from ...backends import RequestRecord, RunResult, Snapshot, Span
from .pacing import Frame

HISTORY_POINTS = 600  # per series: five minutes of simulated time at one snapshot every 0.5 s
KEEP_SPANS_S = 60.0  # timeline kept for the strip, the widest window it can show
SERIES = ("running", "waiting", "throughput", "kv", "ttft_p90", "tpot_p90")
PERCENTILES = (50.0, 90.0, 99.0)


class LiveStats:
    """Counts, latency percentiles, throughput, KV use, their history, and the recent per-rank timeline."""

    def __init__(self, ranks: int, total: int) -> None:
        self.total = total
        self.now = 0.0
        self.last: Snapshot | None = None
        self.ttfts: list[float] = []
        self.tpots: list[float] = []
        self.tokens = 0
        self.spans: list[deque[Span]] = [deque() for _ in range(ranks)]
        self.history: dict[str, deque[float]] = {name: deque(maxlen=HISTORY_POINTS) for name in SERIES}

    @property
    def done(self) -> int:
        return len(self.ttfts)

    @property
    def throughput(self) -> float:
        """Prompt and output tokens of finished requests per simulated second, as the run summary counts them."""
        return self.tokens / self.now if self.now > 0 else 0.0

    def add(self, frame: Frame) -> None:
        """Fold in one frame, in the order the backend reported it."""
        for event in frame.events:
            if isinstance(event, Snapshot):
                self._tick(event)
            elif isinstance(event, Span):
                self.spans[event.rank].append(event)
            else:
                self._finished(event)
        self._prune()

    def finish(self, result: RunResult) -> None:
        """Close the run at its makespan: nothing running or waiting, the KV cache empty (where they are known), and
        the last of its timeline drawn when it came only with the result (measured by a live server's profiler)."""
        if result.spans and not any(self.spans):
            self.spans = [deque() for _ in result.ranks]
            ranks = {r.rank: i for i, r in enumerate(result.ranks)}
            for span in result.spans:
                if span.end >= result.makespan_s - KEEP_SPANS_S:
                    self.spans[ranks[span.rank]].append(span)
        seen = self.last or Snapshot(0.0, 0, 0, 0, 0.0)
        self._tick(
            Snapshot(
                result.makespan_s,
                len(result.records),
                None if seen.running is None else 0,
                None if seen.waiting is None else 0,
                None if seen.kv_used is None else 0.0,
            )
        )

    def latency(self, metric: str) -> tuple[float, float, float] | None:
        """P50, P90 and P99 of `ttft` or `tpot` over the finished requests, None before the first."""
        values = self.ttfts if metric == "ttft" else self.tpots
        if not values:
            return None
        p50, p90, p99 = np.percentile(values, PERCENTILES)
        return float(p50), float(p90), float(p99)

    def percentile(self, metric: str, pct: float) -> float:
        """One percentile of `ttft` or `tpot` over the finished requests (0 before the first)."""
        values = self.ttfts if metric == "ttft" else self.tpots
        return float(np.percentile(values, pct)) if values else 0.0

    def window(self, seconds: float) -> tuple[float, float, list[list[Span]]]:
        """The last `seconds` of simulated time (start, end) and each rank's spans overlapping it."""
        end = self.now
        start = end - seconds
        return start, end, [[s for s in spans if s.end > start and s.start < end] for spans in self.spans]

    def _finished(self, record: RequestRecord) -> None:
        self.ttfts.append(record.ttft_s)
        if record.tpot_s is not None:  # a one-token output has no TPOT
            self.tpots.append(record.tpot_s)
        self.tokens += record.prompt_tokens + record.output_tokens

    def _tick(self, snap: Snapshot) -> None:
        self.now, self.last = snap.time_s, snap
        ttft, tpot = self.latency("ttft"), self.latency("tpot")
        point = {
            "running": snap.running,
            "waiting": snap.waiting,
            "throughput": self.throughput,
            "kv": snap.kv_used,
            "ttft_p90": ttft[1] if ttft else None,
            "tpot_p90": tpot[1] if tpot else None,
        }
        for name, value in point.items():
            if value is not None:  # a figure the backend cannot see has no history, not a line at 0
                self.history[name].append(float(value))

    def _prune(self) -> None:
        horizon = self.now - KEEP_SPANS_S
        for spans in self.spans:
            while spans and spans[0].end < horizon:
                spans.popleft()
