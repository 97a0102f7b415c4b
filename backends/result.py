"""`RunResult`: plain data a backend returns, the store writes and plots read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, NotRequired, TypedDict

from .records import RequestRecord
from .stats import stats

if TYPE_CHECKING:
    import numpy as np

    from .live_result import LiveRun, LiveSummary  # it loads numpy, which a summary does not need


TRANSFER_KINDS = frozenset({"send", "recv", "exchange", "wait"})


class Span(NamedTuple):
    """One block of a rank's timeline: a virtual stage running a micro-batch, or communication it waits on.

    `request` and `chunk` name the micro-batch's lead prefill request and its
    chunk index (-1 for decode-only batches, and in a measured timeline, whose
    profiler names no request); kind is prefill, decode, mixed,
    a blocking transfer: send, recv, or exchange (both ways at once), or wait:
    the receiving rank, free, waiting on an asynchronous transfer still in
    flight (counted as exposed communication).
    """

    rank: int
    stage: int
    batch: int
    request: int
    chunk: int
    start: float
    end: float
    kind: str


class RankTime(NamedTuple):
    """Where one rank's makespan went; the four terms sum to the makespan."""

    rank: int
    compute: float
    exposed_comm: float
    bubble: float  # waiting while the pipeline is busy elsewhere (0 on a single rank: no pipeline)
    idle: float  # waiting for work: nothing in flight (traffic gaps); on a single rank also the host's step overhead


class RunSummary(TypedDict):
    """`RunResult.summary()`: a run's metrics, JSON-ready; None where the backend cannot measure it."""

    requests: int
    ttft_s: dict[str, float] | None  # `stats`: mean, p50, p90, p99
    tpot_s: dict[str, float] | None
    throughput_tok_s: float
    output_throughput_tok_s: float
    request_throughput_rps: float
    makespan_s: float
    steps: int | None
    chunks: int | None
    stage_executions: int | None
    preemptions: int | None
    breakdown_s: dict[str, float] | None  # `RunResult.breakdown()`; None without ranks (a live server)
    bubble_ratio: float | None
    per_rank: list[dict[str, float]]  # each `RankTime` as a dict
    live: NotRequired[LiveSummary]  # a live run's only


@dataclass
class RunResult:
    """Everything one run produced.

    What a backend cannot measure is None or empty, never 0: a live server has
    ranks, spans, steps, chunks and stage executions only when its profiler
    was read (backends/live/profiling.py), and preemptions only when its
    engine counts them. `live` holds what only a live run measures.
    """

    config: dict[str, object]
    scenario: str
    backend: str
    seed: int
    rate: float | None
    records: list[RequestRecord]
    ranks: list[RankTime]
    makespan_s: float
    steps: int | None
    chunks: int | None
    stage_executions: int | None
    spans: list[Span] = field(default_factory=list)
    preemptions: int | None = 0  # requests evicted from the KV cache to be recomputed
    live: LiveRun | None = None  # every request as a live load generator saw it, and the server's metrics

    @property
    def measured_timeline(self) -> bool:
        """Whether its spans were measured on a live server (by the engine's profiler): they name no request."""
        return self.live is not None and bool(self.spans)

    def ttfts(self) -> np.ndarray:
        import numpy as np  # here, not above: a summary needs no numpy

        return np.fromiter((r.ttft_s for r in self.records), float, len(self.records))

    def tpots(self) -> np.ndarray:
        """Each record's TPOT, in record order; NaN for a one-token output, which has none."""
        import numpy as np

        return np.fromiter((np.nan if (t := r.tpot_s) is None else t for r in self.records), float, len(self.records))

    def breakdown(self) -> dict[str, float]:
        """Mean over ranks of compute, bubble, exposed communication and idle seconds."""
        n = max(1, len(self.ranks))
        return {
            "compute": sum(r.compute for r in self.ranks) / n,
            "bubble": sum(r.bubble for r in self.ranks) / n,
            "exposed_comm": sum(r.exposed_comm for r in self.ranks) / n,
            "idle": sum(r.idle for r in self.ranks) / n,
        }

    def summary(self) -> RunSummary:
        """The run's metrics as one JSON-ready object."""
        prompt = sum(r.prompt_tokens for r in self.records)
        output = sum(r.output_tokens for r in self.records)
        span = self.makespan_s or 1.0
        breakdown = self.breakdown() if self.ranks else None
        summary: RunSummary = {
            "requests": len(self.records),
            "ttft_s": stats(r.ttft_s for r in self.records),
            "tpot_s": stats(r.tpot_s for r in self.records),
            "throughput_tok_s": (prompt + output) / span,
            "output_throughput_tok_s": output / span,
            "request_throughput_rps": len(self.records) / span,
            "makespan_s": self.makespan_s,
            "steps": self.steps,
            "chunks": self.chunks,
            "stage_executions": self.stage_executions,
            "preemptions": self.preemptions,
            "breakdown_s": breakdown,
            "bubble_ratio": breakdown["bubble"] / span
            if breakdown and len(self.ranks) > 1
            else None,  # one rank: no pipeline
            "per_rank": [r._asdict() for r in self.ranks],
        }
        if self.live is not None:
            summary["live"] = self.live.summary()
        return summary
