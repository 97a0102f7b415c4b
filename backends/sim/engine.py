"""The discrete-event core: micro-batches moving through ranks.

The layout's key (`program_order`) ranks every (micro-batch, stage) a rank
will run. With synchronous transfers a rank follows that order strictly, as a
worker issuing blocking send/recv must: it runs the smallest-key work of the
micro-batches in flight and waits for it when it is not there yet. A send
blocks the sender until the receiver has posted the matching receive (its
program has reached that work and it is free), then both are busy while the
data moves; when two ranks each block sending to the other (the fold handoff
of vanilla VPP), both directions go at once as one exchange (grouped
send/recv, as engines issue bidirectional transfers to avoid deadlock), so
each has stalled until the other arrived. With asynchronous transfers
(receives posted ahead on alternating communication groups) a rank runs the
smallest-key work that has arrived, a send is queued on the link and
overlaps compute, and a rank waits only when nothing has arrived. Up to `in_flight` micro-batches (slots) are in
flight; when one leaves the last stage its tokens are emitted and the
scheduler forms the next one for the freed slot. A request reaches the
scheduler `request_overhead_ms` after it arrives (the server taking it in);
its TTFT still counts from its arrival.

Time accounting per rank: compute (kernels), exposed communication (TP
collectives, blocked sends and receives, waiting on an in-flight transfer),
idle (no micro-batch anywhere in the pipeline) and bubble (the rest; a
single rank has no pipeline, so there the rest is idle too).
"""

from __future__ import annotations

import bisect
import heapq
import math
from typing import Final, cast

from ..base import RunCancelled, RunObserver, Snapshot
from ..errors import ConfigError
from ..policies.chunking import StepReport
from ..policies.layouts import program_order
from ..records import RequestRecord
from ..result import RankTime, Span
from .costs import StageCosts
from .request import SimRequest
from .scheduler import Batch, StepScheduler

# event kinds
DONE: Final = 0
WAKE: Final = 1
ARRIVE: Final = 2
XFER: Final = 3
ADMIT: Final = 4
# rank states
FREE: Final = 0
COMPUTE: Final = 1
BLOCKED: Final = 2
SNAPSHOT_EVERY_S: Final = 0.5
INF: Final = math.inf
heappush: Final = heapq.heappush  # Final: compiled code reads them once, not from the module's globals each call
heappop: Final = heapq.heappop
insort: Final = bisect.insort
NO_TRANSFER: Final = -1.0  # the xfer_start of work that did not come over a link
SpanRow = tuple[int, int, int, int, int, float, float, str]  # a Span's fields; span_list makes them Spans


class Work:
    """A stage of a micro-batch on its rank: it can run from ready_t (after a transfer begun at xfer_start).

    `key` is its place in the rank's program (`program_order`), unique on the rank.
    """

    __slots__ = ("batch", "stage", "key", "ready_t", "xfer_start")

    def __init__(self, batch: Batch, stage: int, key: int, ready_t: float, xfer_start: float):
        self.batch, self.stage, self.key, self.ready_t, self.xfer_start = batch, stage, key, ready_t, xfer_start


class Handoff:
    """A synchronous transfer of a micro-batch's stage input from rank src to rank dst."""

    __slots__ = ("src", "dst", "batch", "stage", "key")

    def __init__(self, src: int, dst: int, batch: Batch, stage: int, key: int):
        self.src, self.dst, self.batch, self.stage, self.key = src, dst, batch, stage, key


class Rank:
    """One rank's state, its work and its time so far."""

    __slots__ = (
        "state",
        "idle_since",
        "blocked_since",
        "wake_at",
        "compute",
        "comm",
        "program",
        "ready",
        "incoming",
        "sending",
    )

    def __init__(self) -> None:
        self.state = FREE
        self.idle_since = 0.0
        self.blocked_since = 0.0
        self.wake_at = INF  # when a WAKE event will dispatch it
        self.compute = 0.0
        self.comm = 0.0
        self.program: list[int] = []  # sync: a heap of the keys of its work
        self.ready: dict[int, Work] = {}  # work here or on its way, by key
        self.incoming: dict[int, Handoff] = {}  # blocked sync senders, by key
        self.sending: Handoff | None = None  # the handoff it waits to make, blocked sending


class Engine:
    """Runs one workload through one pipeline; build a new one per run."""

    def __init__(
        self,
        *,
        cost: StageCosts,
        scheduler: StepScheduler,
        stage_ranks: tuple[int, ...],
        sync: bool,
        in_flight: int,
        entry_first: bool,
        timeline: bool,
        observer: RunObserver | None,
    ):
        self.cost, self.sched = cost, scheduler
        self.stage_ranks = stage_ranks
        order = program_order(stage_ranks, entry_first)
        self.order_a = [a for a, _ in order]
        self.order_c = [c for _, c in order]
        self.nstages = len(stage_ranks)
        self.pp = max(stage_ranks) + 1
        self.sync = sync
        self.free_slots = list(range(in_flight))
        self.step_overhead = cost.step_overhead_s
        self.request_overhead = cost.request_overhead_s
        self.timeline, self.observer = timeline, observer
        p = self.pp
        self.ranks = [Rank() for _ in range(p)]
        self.link_free = [0.0] * (p * p)  # async: when the link r -> r2 is free, at r * pp + r2
        self.heap: list[tuple[float, int, int, object, object]] = []  # (time, seq, kind, a, b)
        self.seq = 0
        self.in_flight = 0
        self.idle_start = 0.0
        self.idle_total = 0.0
        self.sched_free = 0.0
        self.stage_execs = 0
        self.steps = 0
        self.spans: list[SpanRow] = []
        self.records: list[RequestRecord] = []
        self.done = 0
        self.now = 0.0

    # -- events -------------------------------------------------------------
    def _push(self, t: float, kind: int, a: object, b: object = None) -> None:
        self.seq += 1
        heappush(self.heap, (t, self.seq, kind, a, b))

    def run(self, requests: list[SimRequest], concurrency: int | None) -> float:
        """Serve every request; returns the makespan."""
        for q in requests:
            if q.prompt + q.output > self.sched.kv_capacity:
                raise ConfigError(
                    f"kv_capacity: request {q.id} needs {q.prompt + q.output} tokens of KV cache but the "
                    f"cluster holds {self.sched.kv_capacity}; use more devices or a smaller scenario"
                )
        self.pending = requests
        self.next_arrival = 0
        self.open_loop = concurrency is None
        self.total = len(requests)
        if concurrency is None:
            self._schedule_arrival()
        else:
            for _ in range(min(concurrency, len(requests))):
                self._release(requests[self.next_arrival].arrival)
            self._try_schedule(0.0)
        observer = self.observer
        next_snapshot = SNAPSHOT_EVERY_S
        heap = self.heap
        t = 0.0
        while heap:
            t, _, kind, a, b = heappop(heap)
            self.now = t
            if kind == DONE:
                self._on_done(t, cast(int, a), cast(Batch, b))
            elif kind == WAKE:
                r = cast(int, a)
                if self.ranks[r].wake_at == t:
                    self.ranks[r].wake_at = INF
                self._dispatch(r, t)
            elif kind == XFER:
                self._on_transfer(t, cast("list[Handoff]", a))
            elif kind == ADMIT:
                self.sched.waiting.append(cast(SimRequest, a))
                self._try_schedule(t)
            else:
                self._on_arrival(t)
            if observer is not None and t >= next_snapshot:
                next_snapshot = t + SNAPSHOT_EVERY_S
                observer.snapshot(self.snapshot(t))
                if observer.should_stop():
                    raise RunCancelled()
        if self.done != self.total:
            raise RuntimeError(f"simulation stalled with {self.total - self.done} requests unfinished")
        return max((r.finish_s for r in self.records), default=0.0)

    def snapshot(self, t: float) -> Snapshot:
        """Progress counters at time t."""
        s = self.sched
        return Snapshot(t, self.done, s.running, len(s.waiting), s.kv_used / s.kv_capacity)

    # -- arrivals and scheduling --------------------------------------------
    def _schedule_arrival(self) -> None:
        if self.next_arrival < len(self.pending):
            self._push(self.pending[self.next_arrival].arrival, ARRIVE, None)

    def _release(self, t: float) -> None:
        """The next request arrives at t; the scheduler sees it once the server has taken it in."""
        q = self.pending[self.next_arrival]
        q.arrival = t
        self.next_arrival += 1
        if self.request_overhead:
            self._push(t + self.request_overhead, ADMIT, q)
        else:
            self.sched.waiting.append(q)

    def _on_arrival(self, t: float) -> None:
        pending = self.pending
        while self.next_arrival < len(pending) and pending[self.next_arrival].arrival <= t:
            self._release(pending[self.next_arrival].arrival)
        self._schedule_arrival()
        self._try_schedule(t)

    def _try_schedule(self, t: float) -> None:
        """Form a micro-batch for every free slot that has work."""
        sticky, free = self.sched.sticky, self.free_slots
        i = 0
        while i < len(free):  # forming a step frees no slot, so the list changes only here
            b = self.sched.form(t, free[i])
            if b is None:
                if sticky:
                    i += 1
                    continue  # another slot may hold decodes
                return
            del free[i]
            self.steps += 1
            if self.in_flight == 0:
                self.idle_total += t - self.idle_start
            self.in_flight += 1
            self.sched_free = (t if t > self.sched_free else self.sched_free) + self.step_overhead
            if self.sync:
                for stage, rank in enumerate(self.stage_ranks):
                    heappush(self.ranks[rank].program, self._key(b.id, stage))
            self._arrive(self.stage_ranks[0], b, 0, self.sched_free, NO_TRANSFER)

    # -- ranks ----------------------------------------------------------------
    def _arrive(self, r: int, b: Batch, stage: int, ready_t: float, xfer_start: float) -> None:
        """Stage `stage` of b can run on rank r from ready_t (after a transfer that started at xfer_start)."""
        key = self._key(b.id, stage)
        self.ranks[r].ready[key] = Work(b, stage, key, ready_t, xfer_start)
        self._dispatch(r, self.now)

    def _dispatch(self, r: int, t: float) -> None:
        """If rank r is free, start its next work (or receive it, or wait for it)."""
        rank = self.ranks[r]
        if rank.state != FREE:
            return
        work = self._next_in_program(r, t) if self.sync else self._first_arrived(r, t)
        if work is None:
            return
        del rank.ready[work.key]
        b, stage, ready_t = work.batch, work.stage, work.ready_t
        since, xfer_start = rank.idle_since, work.xfer_start
        if xfer_start != NO_TRANSFER and ready_t > since:  # waited on an in-flight transfer
            wait_from = xfer_start if xfer_start > since else since
            rank.comm += ready_t - wait_from
            if self.timeline:
                self._record((r, stage, b.id, b.lead, b.chunk, wait_from, ready_t, "wait"))
        busy = b.busy[stage]
        coll = b.comm[stage]
        rank.compute += busy - coll
        rank.comm += coll
        rank.state = COMPUTE
        end = t + busy
        self._push(end, DONE, r, b)
        if self.timeline:
            self._record((r, stage, b.id, b.lead, b.chunk, t, end, b.kind))

    def _next_in_program(self, r: int, t: float) -> Work | None:
        """Synchronous ranks: the head of the program if it is here; receive it if its sender waits."""
        key = self._next(r)
        if key < 0:
            return None
        work = self.ranks[r].ready.get(key)
        if work is not None:
            if work.ready_t > t:  # the host is still preparing it
                self._wake(r, work.ready_t)
                return None
            heappop(self.ranks[r].program)
            return work
        if key in self.ranks[r].incoming:
            self._receive(r, t, key)
        return None  # still upstream: the rank waits for it (bubble)

    def _first_arrived(self, r: int, t: float) -> Work | None:
        """Asynchronous ranks: the smallest-key work that has arrived; else wake when the next lands."""
        best: Work | None = None
        soonest = INF
        for work in self.ranks[r].ready.values():
            if work.ready_t <= t:
                if best is None or work.key < best.key:
                    best = work
            elif work.ready_t < soonest:
                soonest = work.ready_t
        if best is None:
            self._wake(r, soonest)
        return best

    def _key(self, batch: int, stage: int) -> int:
        """The place of a stage of a micro-batch in its rank's program (`program_order`)."""
        return self.order_a[stage] * batch + self.order_c[stage]

    def _wake(self, r: int, when: float) -> None:
        """Dispatch rank r again at `when` (its next work lands then)."""
        if when < self.ranks[r].wake_at:
            self.ranks[r].wake_at = when
            self._push(when, WAKE, r)

    def _record(self, span: SpanRow) -> None:
        self.spans.append(span)
        if self.observer is not None:
            self.observer.span(Span._make(span))

    def _free(self, r: int, t: float) -> None:
        self.ranks[r].state = FREE
        self.ranks[r].idle_since = t
        self._dispatch(r, t)

    def _on_done(self, t: float, r: int, b: Batch) -> None:
        self.stage_execs += 1
        nxt = b.stage + 1
        if nxt == self.nstages:
            self._complete(t, b)
            self._free(r, t)
            return
        b.stage = nxt
        r2 = self.stage_ranks[nxt]
        if r2 == r:
            self.ranks[r].state = FREE
            self.ranks[r].idle_since = t
            self._arrive(r, b, nxt, t, NO_TRANSFER)
        elif self.sync:
            self._send(t, r, r2, b, nxt)
        else:
            link = r * self.pp + r2
            free = self.link_free[link]
            start = free if free > t else t
            arrive = start + self.cost.transfer_time(b.tokens)
            self.link_free[link] = arrive
            self._free(r, t)
            self._arrive(r2, b, nxt, arrive, start)

    # -- synchronous transfers -----------------------------------------------
    def _next(self, r: int) -> int:
        """The key of the next work in rank r's program, -1 when it has none."""
        program = self.ranks[r].program
        return program[0] if program else -1

    def _send(self, t: float, r: int, r2: int, b: Batch, stage: int) -> None:
        """Rank r blocks sending b to r2 until r2 posts the matching receive."""
        self.ranks[r].state = BLOCKED
        self.ranks[r].blocked_since = t
        handoff = Handoff(r, r2, b, stage, self._key(b.id, stage))
        pending = self.ranks[r2].sending
        if pending is not None and pending.dst == r:  # each blocks sending to the other: one exchange both ways
            self.ranks[r2].sending = None
            del self.ranks[r].incoming[pending.key]
            x = max(self.cost.transfer_time(b.tokens), self.cost.transfer_time(pending.batch.tokens))
            self._push(t + x, XFER, [handoff, pending])
        elif self.ranks[r2].state == FREE and self._next(r2) == handoff.key:
            self.ranks[r2].state = BLOCKED
            self.ranks[r2].blocked_since = t
            self._push(t + self.cost.transfer_time(b.tokens), XFER, [handoff])
        else:
            self.ranks[r2].incoming[handoff.key] = handoff
            self.ranks[r].sending = handoff

    def _receive(self, r: int, t: float, key: int) -> None:
        """Free rank r posts the receive its program has reached; the blocked sender hands over."""
        handoff = self.ranks[r].incoming.pop(key)
        self.ranks[handoff.src].sending = None
        self.ranks[r].state = BLOCKED
        self.ranks[r].blocked_since = t
        self._push(t + self.cost.transfer_time(handoff.batch.tokens), XFER, [handoff])

    def _on_transfer(self, t: float, transfers: list[Handoff]) -> None:
        """Blocking transfers landed: both sides are free again and the data is ready.

        A lone transfer: the sender's span is a send of the previous stage,
        the receiver's a recv. An exchange (the second transfer goes back
        from the first's receiver): both spans are exchanges of the second.
        """
        first, last = transfers[0], transfers[-1]
        if len(transfers) == 1:
            self._unblock(first.src, t, "send", first.stage - 1, first.batch)
            self._unblock(first.dst, t, "recv", first.stage, first.batch)
        else:
            self._unblock(first.src, t, "exchange", last.stage, last.batch)
            self._unblock(first.dst, t, "exchange", last.stage - 1, last.batch)
        for h in transfers:
            self.ranks[h.dst].ready[h.key] = Work(h.batch, h.stage, h.key, t, NO_TRANSFER)
        self._dispatch(first.src, t)
        self._dispatch(first.dst, t)

    def _unblock(self, r: int, t: float, kind: str, stage: int, b: Batch) -> None:
        """Rank r's blocking transfer ended at t: its wait is exposed communication, and it is free."""
        rank = self.ranks[r]
        if self.timeline and t > rank.blocked_since:
            self._record((r, stage, b.id, b.lead, b.chunk, rank.blocked_since, t, kind))
        rank.comm += t - rank.blocked_since
        rank.state = FREE
        rank.idle_since = t

    # -- completion -------------------------------------------------------------
    def _complete(self, t: float, b: Batch) -> None:
        for q in self.sched.complete(b, t):
            self._finish(q, t)
        if self.sched.learns:
            self.sched.policy.observe(self._report(t, b))
        insort(self.free_slots, b.slot)
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle_start = t
        self._try_schedule(t)

    def _report(self, t: float, b: Batch) -> StepReport:
        """What a learning policy may know about a completed step."""
        s = self.sched
        return StepReport(
            finished_at=t,
            latency_s=t - b.created,
            stage_s=b.busy[0],
            prefill_tokens=b.prefill_tokens,
            decode_tokens=b.tokens - b.prefill_tokens,
            chunk_prefix=b.chunk_prefix,
            chunk_sq=b.chunk_sq,
            decode_context=b.decode_context,
            ttfts=tuple(s.ttfts),
            token_gaps=tuple(s.gaps),
            kv_free=1.0 - s.kv_used / s.kv_capacity,
            running=s.running,
            waiting=len(s.waiting),
            backlog_tokens=s.backlog_tokens(),
            admissible_tokens=s.admissible_tokens(),
            finished_prompt_tokens=s.finished_prompt,
            arrived=self.next_arrival,
        )

    def _finish(self, q: SimRequest, t: float) -> None:
        q.finish = t
        self.done += 1
        rec = RequestRecord(q.id, q.arrival, q.prompt, q.output, q.first_token, t)
        self.records.append(rec)
        if self.observer is not None:
            self.observer.request_done(rec)
        if not self.open_loop and self.next_arrival < len(self.pending):
            self._release(t)

    # -- results ------------------------------------------------------------------
    def rank_times(self, makespan: float) -> list[RankTime]:
        """Per-rank split of the makespan; one rank has no pipeline to wait on, so all its waiting is idle."""
        idle = self.idle_total
        if self.pp == 1:  # between steps it waits for the host's next one (step overhead): no bubble
            rank = self.ranks[0]
            return [RankTime(0, rank.compute, rank.comm, 0.0, max(0.0, makespan - rank.compute - rank.comm))]
        return [
            RankTime(r, rank.compute, rank.comm, max(0.0, makespan - rank.compute - rank.comm - idle), idle)
            for r, rank in enumerate(self.ranks)
        ]

    def span_list(self) -> list[Span]:
        """The recorded timeline, sorted by rank and start."""
        return sorted(map(Span._make, self.spans), key=lambda s: (s.rank, s.start))
