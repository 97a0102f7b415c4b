"""A measured per-rank timeline: the rank traces of one profiled run turned into the spans and per-rank time split the
simulator writes, over the run's own clock.

Each rank's non-empty steps are numbered in order; the n-th step of every rank is the same micro-batch (vLLM's
workers start and stop profiling between the same two steps, and every rank runs every micro-batch in order),
which is also the n-th transfer out of a rank and into the next. A step is compute (prefill, decode or mixed by
what it ran), less any transfer call inside it. A send is exposed communication from its call to its return; a
receive only from when the matching send started: before that the rank waits for the previous stage's work,
which is bubble, as in the simulator (a receiving rank's wait is a transfer only once the data is coming).
What the profiler names nothing for (the host's scheduling between steps, the last rank's sampling, empty
micro-batches) is not compute. Per rank the makespan then splits exactly: idle while no rank has a span,
bubble while another rank has one and this rank none.

Spans name no request or chunk (-1: the profiler's step annotation counts requests, it does not name them);
the batch is the step's number. Times are seconds from the run's start; spans are clipped to the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from ..result import RankTime, Span
from .rank_trace import Call, RankTrace, TraceFileError

NONE = -1  # result.py's "no request / chunk"
TRANSFERS = ("send", "recv")

Interval = tuple[float, float]


class MeasuredTimeline(NamedTuple):
    """What a profiled run's traces add to its RunResult."""

    spans: list[Span]
    ranks: list[RankTime]
    steps: int  # micro-batches that ran in the run (on the first rank)
    chunks: int  # prefill chunks among them: a step's context requests each ran one
    stage_executions: int  # steps on all ranks


def trace_window(traces: Sequence[RankTrace]) -> Interval:
    """From the first step's start to the last step's end on any rank, in wall-clock microseconds: the window of
    traces imported on their own, without a run."""
    return min(t.base_us + t.steps[0].start_us for t in traces), max(t.base_us + t.steps[-1].end_us for t in traces)


def measured_timeline(traces: Sequence[RankTrace], start_us: float, end_us: float) -> MeasuredTimeline:
    """The spans and per-rank times of `traces` (one or more; of each pipeline rank the first tensor-parallel
    rank's is read) over the run from `start_us` to `end_us` (wall-clock microseconds); TraceFileError when two
    traces claim the same rank."""
    ordered = _one_per_rank(traces)
    makespan = (end_us - start_us) / 1e6
    spans: list[Span] = []
    ranks: list[tuple[int, float, float]] = []  # rank, compute, exposed communication
    for stage, trace in enumerate(ordered):
        mine = _rank_spans(trace, stage, ordered[stage - 1] if stage else None, start_us, makespan)
        spans += mine
        comm = _union_length((s.start, s.end) for s in mine if s.kind in TRANSFERS)
        ranks.append((trace.rank, sum(s.end - s.start for s in mine if s.kind not in TRANSFERS), comm))
    anywhere = _union_length((s.start, s.end) for s in spans)
    ran = {(s.rank, s.batch) for s in spans if s.kind not in TRANSFERS}
    first = ordered[0]
    batches = [batch for rank, batch in ran if rank == first.rank]
    return MeasuredTimeline(
        spans,
        [  # rounding can leave a bubble of -1e-17 where a rank was never waiting
            RankTime(rank, compute, comm, max(0.0, anywhere - compute - comm), makespan - anywhere)
            for rank, compute, comm in ranks
        ],
        steps=len(batches),
        chunks=sum(first.steps[batch].context for batch in batches),
        stage_executions=len(ran),
    )


def _rank_spans(
    trace: RankTrace, stage: int, upstream: RankTrace | None, start_us: float, makespan: float
) -> list[Span]:
    """One rank's spans in time order, in seconds from `start_us` and clipped to the makespan: its transfers, and
    its steps less the transfers inside them; a receive from when `upstream`'s matching send started."""
    offset = trace.base_us - start_us  # the trace's times to the run's, before they are made seconds

    def clip(call: Call) -> Interval | None:
        lo, hi = max(0.0, (offset + call.start_us) / 1e6), min(makespan, (offset + call.end_us) / 1e6)
        return (lo, hi) if hi > lo else None

    sends = () if upstream is None else [_rebased(c, upstream.base_us - trace.base_us) for c in upstream.sends]
    calls = [("send", batch, call) for batch, call in enumerate(trace.sends)]
    calls += [("recv", batch, _after_send(call, sends, batch)) for batch, call in enumerate(trace.receives)]
    transfers = sorted(
        ((window, kind, batch) for kind, batch, call in calls if (window := clip(call)) is not None),
    )
    blocked = [window for window, _, _ in transfers]
    spans = [Span(trace.rank, stage, batch, NONE, NONE, lo, hi, kind) for (lo, hi), kind, batch in transfers]
    for batch, step in enumerate(trace.steps):
        if (window := clip(Call(step.start_us, step.end_us))) is not None:
            spans += [
                Span(trace.rank, stage, batch, NONE, NONE, lo, hi, step.kind) for lo, hi in _minus(window, blocked)
            ]
    return sorted(spans, key=lambda s: s.start)


def _one_per_rank(traces: Sequence[RankTrace]) -> list[RankTrace]:
    """Each pipeline rank's trace, by rank: its first tensor-parallel rank's (the others ran the same steps)."""
    chosen: dict[int, RankTrace] = {}
    for trace in sorted(traces, key=lambda t: (t.rank, t.tp_rank)):
        kept = chosen.setdefault(trace.rank, trace)
        if kept is not trace and kept.tp_rank == trace.tp_rank:
            raise TraceFileError(
                f"profile: {kept.path} and {trace.path} are both traces of pipeline rank {trace.rank} "
                f"(tensor-parallel rank {trace.tp_rank})"
            )
    return list(chosen.values())


def _rebased(call: Call, shift_us: float) -> Call:
    """`call` counted from a base `shift_us` microseconds earlier."""
    return Call(call.start_us + shift_us, call.end_us + shift_us)


def _after_send(receive: Call, sends: Sequence[Call], batch: int) -> Call:
    """A receive call from when the previous rank's matching send started (its whole call when none is known)."""
    if batch >= len(sends):
        return receive
    return Call(max(receive.start_us, sends[batch].start_us), receive.end_us)


def _minus(window: Interval, holes: Sequence[Interval]) -> list[Interval]:
    """The parts of `window` outside every interval in `holes` (sorted by start)."""
    parts, lo = [], window[0]
    for start, end in holes:
        if end <= lo or start >= window[1]:
            continue
        if start > lo:
            parts.append((lo, start))
        lo = max(lo, end)
    if lo < window[1]:
        parts.append((lo, window[1]))
    return parts


def _union_length(intervals: Iterable[Interval]) -> float:
    """The length of the union of `intervals`."""
    total, reach = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total
