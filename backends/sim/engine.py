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
idle (no micro-batch anywhere in the pipeline) and bubble (the rest).
"""

from __future__ import annotations

import heapq
import itertools
import math

from ..base import RunCancelled, RunObserver, Snapshot
from ..policies.chunking import StepReport
from ..result import RankTime, RequestRecord, Span
from ..errors import ConfigError
from ..policies.layouts import program_order
from .costs import StageCosts
from .scheduler import Batch, SimRequest, StepScheduler

DONE, WAKE, ARRIVE, XFER, ADMIT = 0, 1, 2, 3, 4
FREE, COMPUTE, BLOCKED = 0, 1, 2
SNAPSHOT_EVERY_S = 0.5


class Engine:
    """Runs one workload through one pipeline; build a new one per run."""

    def __init__(self, cost: StageCosts, scheduler: StepScheduler, stage_ranks: tuple[int, ...],
                 sync: bool, in_flight: int, entry_first: bool,
                 timeline: bool, observer: RunObserver | None):
        self.cost, self.sched = cost, scheduler
        self.stage_ranks = stage_ranks
        self.order = program_order(stage_ranks, entry_first)
        self.nstages = len(stage_ranks)
        self.pp = max(stage_ranks) + 1
        self.sync = sync
        self.free_slots = list(range(in_flight))
        self.step_overhead = cost.step_overhead_s
        self.request_overhead = cost.request_overhead_s
        self.timeline, self.observer = timeline, observer
        p = self.pp
        self.state = [FREE] * p
        self.idle_since = [0.0] * p
        self.blocked_since = [0.0] * p
        self.program: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]  # sync: heaps of (key, batch, stage)
        self.ready: list[dict[tuple[int, int], tuple]] = [{} for _ in range(p)]  # work here or on its way
        self.incoming: list[dict[tuple[int, int], tuple]] = [{} for _ in range(p)]  # blocked sync senders
        self.sending: list[tuple | None] = [None] * p  # (to rank, batch, stage) a blocked sender waits to hand over
        self.wake_at = [math.inf] * p
        self.link_free: dict[tuple[int, int], float] = {}
        self.compute = [0.0] * p
        self.comm = [0.0] * p
        self.heap: list[tuple] = []
        self.seq = itertools.count()
        self.in_flight = 0
        self.idle_start = 0.0
        self.idle_total = 0.0
        self.sched_free = 0.0
        self.stage_execs = 0
        self.steps = 0
        self.spans: list[tuple] = []
        self.records: list[RequestRecord] = []
        self.done = 0
        self.now = 0.0

    # -- events -------------------------------------------------------------
    def _push(self, t: float, kind: int, a: object, b: object = None) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, a, b))

    def run(self, requests: list[SimRequest], concurrency: int | None) -> float:
        """Serve every request; returns the makespan."""
        for q in requests:
            if q.prompt + q.output > self.sched.kv_capacity:
                raise ConfigError(
                    f"kv_capacity: request {q.id} needs {q.prompt + q.output} tokens of KV cache but the "
                    f"cluster holds {self.sched.kv_capacity}; use more devices or a smaller scenario")
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
        heap, pop = self.heap, heapq.heappop
        on_done, dispatch = self._on_done, self._dispatch
        t = 0.0
        while heap:
            t, _, kind, a, b = pop(heap)
            self.now = t
            if kind == DONE:
                on_done(t, a, b)
            elif kind == WAKE:
                if self.wake_at[a] == t:
                    self.wake_at[a] = math.inf
                dispatch(a, t)
            elif kind == XFER:
                self._on_transfer(t, a)
            elif kind == ADMIT:
                self.sched.waiting.append(a)
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
        sticky = self.sched.sticky
        for slot in list(self.free_slots):
            b = self.sched.form(t, slot)
            if b is None:
                if sticky:
                    continue  # another slot may hold decodes
                return
            self.free_slots.remove(slot)
            self.steps += 1
            if self.in_flight == 0:
                self.idle_total += t - self.idle_start
            self.in_flight += 1
            self.sched_free = max(self.sched_free, t) + self.step_overhead
            if self.sync:
                for stage, rank in enumerate(self.stage_ranks):
                    heapq.heappush(self.program[rank], (self._key(b.id, stage), b.id, stage))
            self._arrive(self.stage_ranks[0], b, 0, self.sched_free, None)

    # -- ranks ----------------------------------------------------------------
    def _arrive(self, r: int, b: Batch, stage: int, ready_t: float, xfer_start: float | None) -> None:
        """Stage `stage` of b can run on rank r from ready_t (after a transfer that started at xfer_start)."""
        self.ready[r][(b.id, stage)] = (b, ready_t, xfer_start)
        self._dispatch(r, self.now)

    def _dispatch(self, r: int, t: float) -> None:
        """If rank r is free, start its next work (or receive it, or wait for it)."""
        if self.state[r] != FREE:
            return
        work = self._next_in_program(r, t) if self.sync else self._first_arrived(r, t)
        if work is None:
            return
        b, ready_t, xfer_start = self.ready[r].pop(work)
        stage = work[1]
        if xfer_start is not None and ready_t > self.idle_since[r]:  # waited on an in-flight transfer
            wait_from = max(self.idle_since[r], xfer_start)
            self.comm[r] += ready_t - wait_from
            if self.timeline:
                self._record((r, stage, b.id, b.lead, b.chunk, wait_from, ready_t, "wait"))
        busy = b.busy[stage]
        coll = b.comm[stage]
        self.compute[r] += busy - coll
        self.comm[r] += coll
        self.state[r] = COMPUTE
        end = t + busy
        heapq.heappush(self.heap, (end, next(self.seq), DONE, r, b))
        if self.timeline:
            self._record((r, stage, b.id, b.lead, b.chunk, t, end, b.kind))

    def _next_in_program(self, r: int, t: float) -> tuple[int, int] | None:
        """Synchronous ranks: the head of the program if it is here; receive it if its sender waits."""
        work = self._next(r)
        if work is None:
            return None
        item = self.ready[r].get(work)
        if item is not None:
            if item[1] > t:  # the host is still preparing it
                self._wake(r, item[1])
                return None
            heapq.heappop(self.program[r])
            return work
        if work in self.incoming[r]:
            self._receive(r, t, work)
        return None  # still upstream: the rank waits for it (bubble)

    def _first_arrived(self, r: int, t: float) -> tuple[int, int] | None:
        """Asynchronous ranks: the smallest-key work that has arrived; else wake when the next lands."""
        best: tuple[int, int] | None = None
        best_key = 0
        soonest = math.inf
        for work, (_, ready_t, _) in self.ready[r].items():
            if ready_t <= t:
                key = self._key(*work)
                if best is None or key < best_key:
                    best, best_key = work, key
            elif ready_t < soonest:
                soonest = ready_t
        if best is None:
            self._wake(r, soonest)
        return best

    def _key(self, batch: int, stage: int) -> int:
        """The place of a stage of a micro-batch in its rank's program (`program_order`)."""
        a, c = self.order[stage]
        return a * batch + c

    def _wake(self, r: int, when: float) -> None:
        """Dispatch rank r again at `when` (its next work lands then)."""
        if when < self.wake_at[r]:
            self.wake_at[r] = when
            heapq.heappush(self.heap, (when, next(self.seq), WAKE, r, None))

    def _record(self, span: tuple) -> None:
        self.spans.append(span)
        if self.observer is not None:
            self.observer.span(Span._make(span))

    def _free(self, r: int, t: float) -> None:
        self.state[r] = FREE
        self.idle_since[r] = t
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
            self.state[r] = FREE
            self.idle_since[r] = t
            self._arrive(r, b, nxt, t, None)
        elif self.sync:
            self._send(t, r, r2, b, nxt)
        else:
            start = max(t, self.link_free.get((r, r2), 0.0))
            arrive = start + self.cost.transfer_time(b.tokens)
            self.link_free[(r, r2)] = arrive
            self._free(r, t)
            self._arrive(r2, b, nxt, arrive, start)

    # -- synchronous transfers -----------------------------------------------
    def _next(self, r: int) -> tuple[int, int] | None:
        """(batch, stage) of the next work in rank r's program."""
        return self.program[r][0][1:] if self.program[r] else None

    def _send(self, t: float, r: int, r2: int, b: Batch, stage: int) -> None:
        """Rank r blocks sending b to r2 until r2 posts the matching receive."""
        self.state[r] = BLOCKED
        self.blocked_since[r] = t
        pending = self.sending[r2]
        if pending is not None and pending[0] == r:  # each blocks sending to the other: one exchange both ways
            self.sending[r2] = None
            del self.incoming[r][(pending[1].id, pending[2])]
            x = max(self.cost.transfer_time(b.tokens), self.cost.transfer_time(pending[1].tokens))
            self._push(t + x, XFER, ((r, r2, b, stage), (r2, r, pending[1], pending[2])))
        elif self.state[r2] == FREE and self._next(r2) == (b.id, stage):
            self.state[r2] = BLOCKED
            self.blocked_since[r2] = t
            self._push(t + self.cost.transfer_time(b.tokens), XFER, ((r, r2, b, stage),))
        else:
            self.incoming[r2][(b.id, stage)] = (r, b, stage)
            self.sending[r] = (r2, b, stage)

    def _receive(self, r: int, t: float, work: tuple[int, int]) -> None:
        """Free rank r posts the receive its program has reached; the blocked sender hands over."""
        src, b, stage = self.incoming[r].pop(work)
        self.sending[src] = None
        self.state[r] = BLOCKED
        self.blocked_since[r] = t
        self._push(t + self.cost.transfer_time(b.tokens), XFER, ((src, r, b, stage),))

    def _on_transfer(self, t: float, transfers: tuple) -> None:
        """Blocking transfers landed: both sides are free again and the data is ready."""
        roles: dict[int, tuple[str, int, Batch]] = {}
        for src, dst, b, stage in transfers:
            roles[src] = ("exchange" if src in roles else "send", stage - 1, b)
            roles[dst] = ("exchange" if dst in roles else "recv", stage, b)
        for r, (kind, stage, b) in roles.items():
            if self.timeline and t > self.blocked_since[r]:
                self._record((r, stage, b.id, b.lead, b.chunk, self.blocked_since[r], t, kind))
            self.comm[r] += t - self.blocked_since[r]
            self.state[r] = FREE
            self.idle_since[r] = t
        for _, dst, b, stage in transfers:
            self.ready[dst][(b.id, stage)] = (b, t, None)
        for r in roles:
            self._dispatch(r, t)

    # -- completion -------------------------------------------------------------
    def _complete(self, t: float, b: Batch) -> None:
        finished, ttfts, gaps = self.sched.complete(b, t)
        for q in finished:
            self._finish(q, t)
        if self.sched.learns:
            self.sched.policy.observe(self._report(t, b, ttfts, gaps))
        self.free_slots.append(b.slot)
        self.free_slots.sort()
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle_start = t
        self._try_schedule(t)

    def _report(self, t: float, b: Batch, ttfts: list[float], gaps: list[float]) -> StepReport:
        """What a learning policy may know about a completed step."""
        s = self.sched
        return StepReport(
            finished_at=t, latency_s=t - b.created, stage_s=b.busy[0], prefill_tokens=b.prefill_tokens,
            decode_tokens=b.tokens - b.prefill_tokens, chunk_prefix=b.chunk_prefix, chunk_sq=b.chunk_sq,
            decode_context=b.decode_context, ttfts=tuple(ttfts), token_gaps=tuple(gaps),
            kv_free=1.0 - s.kv_used / s.kv_capacity, running=s.running, waiting=len(s.waiting),
            backlog_tokens=s.backlog_tokens(), admissible_tokens=s.admissible_tokens(),
            finished_prompt_tokens=s.finished_prompt, arrived=self.next_arrival)

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
        """Per-rank split of the makespan."""
        idle = self.idle_total
        return [RankTime(r, self.compute[r], self.comm[r], max(0.0, makespan - self.compute[r] - self.comm[r] - idle), idle)
                for r in range(self.pp)]

    def span_list(self) -> list[Span]:
        """The recorded timeline, sorted by rank and start."""
        return sorted(map(Span._make, self.spans), key=lambda s: (s.rank, s.start))
