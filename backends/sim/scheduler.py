"""Step scheduler: forms each micro-batch from running and waiting requests.

Like vLLM's v1 scheduler: one token budget per step shared by decodes (one
token per running request whose previous token is out) and prefill chunks
(with `decode_in_budget` off, as in SGLang, the budget bounds prefill only;
with `mixed_batches` off, as in SGLang without --enable-mixed-chunk, a step
is either all prefill, whenever prompt work is ready, or all decode);
a prompt's next chunk can be issued while its previous chunk is still in the
pipeline (it only needs that chunk's KV on the first stage, which FIFO order
guarantees). KV is held as it is written: a prompt chunk's tokens when the
chunk is scheduled, one token per decode. Admission of a waiting request
needs a free running slot and room for its prompt, the rest of the admitted
prompts and `output_reserve` of every running request's remaining output
(1 reserves it all, so nothing is ever preempted; SGLang's new-token ratio
settles at 0.098, vLLM reserves none). When a decode finds the cache full the
youngest decodable request is preempted (recompute, as vLLM and SGLang's
retraction do): its KV is freed and it waits at the head of the queue to
prefill its prompt and generated tokens again, which yields its next token.
How large chunks are is left to the mode's chunk policy; with `pack_prompts`
off (the fold-back modes without cross-request packing) a step takes prefill
chunks of one prompt only.

Which decodes join a step follows one of two engines:
- vLLM (`sticky_decodes` off): any running request whose previous token is
  out may join the next step, up to the budget; requests float between
  micro-batches (vLLM v1's scheduler skips only requests still in flight).
- SGLang (`sticky_decodes` on): one running batch per micro-batch slot
  (`running_mbs[mb_id]` in SGLang's PP scheduler). A request joins the slot
  whose step emitted its first token and stays there; each step of a slot
  decodes that slot's whole running batch, whatever the chunk size (the
  chunked-prefill size bounds prefill tokens only). As requests finish the
  slots drift apart in size. Delay scheduling moves requests between slots.

Decoding requests are queued one by one (the exact loop) only where a policy
picks requests individually (delay scheduling) or a caller asks for it;
otherwise they are queued as `DecodeGroup`s that advance a step at a time
(groups.py), with the same results to the last bit.
"""

from __future__ import annotations

from collections import deque
from typing import Final, Protocol, cast

from ..parts import Scheduling
from ..policies.chunking import ChunkPolicy, FixedChunk
from ..policies.delay import DelayScheduler
from .costs import BatchShape, StageCosts, capped_pairs
from .groups import DecodeGroup, merge
from .request import SimRequest

# what a step's work on a request yields
PREFILL: Final = 0
FIRST_TOKEN: Final = 1
DECODE: Final = 2
RESUME: Final = 3


class Batch:
    """One micro-batch (scheduler step) travelling through the virtual stages.

    Its decodes are `decodes` (queued one by one) or `groups` (queued in
    groups); `entries` are its prefill chunks, each with what it yields.
    """

    __slots__ = (
        "id",
        "slot",
        "decodes",
        "groups",
        "entries",
        "busy",
        "comm",
        "stage",
        "lead",
        "chunk",
        "kind",
        "tokens",
        "prefill_tokens",
        "created",
        "chunk_prefix",
        "chunk_sq",
        "decode_context",
    )
    # set by the scheduler once the step is formed
    tokens: int
    prefill_tokens: int
    chunk_prefix: int
    chunk_sq: int
    decode_context: int
    lead: int  # the lead prefill request's id, -1 for a decode-only step
    chunk: int  # its chunk index
    kind: str  # prefill, decode or mixed

    def __init__(
        self,
        bid: int,
        slot: int,
        decodes: list[SimRequest],
        groups: list[DecodeGroup],
        entries: list[tuple[SimRequest, int]],
        created: float,
    ):
        self.id, self.slot, self.created = bid, slot, created
        self.decodes, self.groups, self.entries = decodes, groups, entries
        self.stage = 0
        self.busy: list[float] = []
        self.comm: list[float] = []

    def decoding(self) -> list[SimRequest]:
        """The requests this micro-batch decodes, in order (until it completes)."""
        return self.decodes + [q for g in self.groups for q in g.members]


class SchedulerProbe(Protocol):
    """Watches a scheduler step by step (the tests' logs of what it formed and emitted); called when set."""

    def formed(self, b: Batch) -> None: ...

    def completed(self, b: Batch, t: float, decoded: list[SimRequest], finished: list[SimRequest]) -> None:
        """b left the last stage at t: each of `decoded` and each request b finished prefilling emitted a token."""

    def evicted(self, q: SimRequest) -> None:
        """q is about to be preempted."""


class StepScheduler:
    """Holds the request queues and builds micro-batches.

    Queues: `waiting` (arrived, not admitted), `prefilling` (admitted, first
    token not out yet, in admission order) and `decoding`, one queue of
    running requests whose previous token is out per micro-batch slot (one
    queue shared by every slot unless `sticky_decodes`), of requests or, when
    `bulk`, of DecodeGroups. `exact` keeps the one-by-one queues.
    """

    def __init__(
        self,
        *,
        cost: StageCosts,
        chunk_policy: ChunkPolicy,
        scheduling: Scheduling,
        kv_capacity: int,
        slots: int,
        topk: int = 0,
        delay: DelayScheduler | None = None,
        pack_prompts: bool = True,
        exact: bool = False,
    ):
        self.cost, self.policy = cost, chunk_policy
        self.delay = delay  # decode micro-batch rebalancing, when on
        self.decode_in_budget, self.mixed_batches = scheduling.decode_in_budget, scheduling.mixed_batches
        self.pack_prompts, self.sticky = pack_prompts, scheduling.sticky_decodes
        self.max_running, self.kv_capacity = scheduling.max_running, kv_capacity
        self.output_reserve = scheduling.output_reserve
        self.topk = topk  # DSA keys per query (0 = dense attention)
        kind = type(chunk_policy)
        self.learns = kind.observe is not FixedChunk.observe  # completions report to the policy
        # FixedChunk's step budget and chunk are its `chunk`: read where not overridden (a call into Python saved)
        self.fixed_budget = kind.step_budget is FixedChunk.step_budget
        self.fixed_chunk = kind.request_chunk is FixedChunk.request_chunk
        self.bulk = delay is None and not exact
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        pools = slots if scheduling.sticky_decodes else 1
        self.decoding: list[deque[SimRequest]] = [deque() for _ in range(pools)]
        self.groups: list[list[DecodeGroup]] = [[] for _ in range(pools)]  # a few groups each: lists
        self.running = 0
        self.kv_used = 0
        self.pending_prompt = 0  # tokens admitted requests still have to prefill
        self.output_left = 0  # tokens running requests still have to generate
        self.preemptions = 0
        self.finished_prompt = 0  # prompt tokens of the requests finished so far
        self.admitted = 0
        self.batches = 0
        self.chunks = 0
        self.probe: SchedulerProbe | None = None
        self.ttfts: list[float] = []  # of the step completed last, when the policy learns
        self.gaps: list[float] = []

    def form(self, now: float, slot: int = 0) -> Batch | None:
        """Build the next micro-batch for a free slot, or None when there is nothing to run."""
        policy = self.policy
        prefill_budget = cast(FixedChunk, policy).chunk if self.fixed_budget else policy.step_budget()
        pool = slot if self.sticky else 0
        ready = 0
        if self.bulk:
            for g in self.groups[pool]:
                ready += len(g.members)
        else:
            ready = len(self.decoding[pool])
        if not self.mixed_batches and self._prompt_work_ready():
            decode_slots = 0  # a prefill-only step: decodes wait for the next one
        elif self.sticky:
            decode_slots = ready  # the slot's whole running batch
        else:
            decode_slots = prefill_budget if self.decode_in_budget else ready
        decodes: list[SimRequest] = []
        groups: list[DecodeGroup] = []
        if self.bulk:
            groups, decode_tokens, dec_pairs, dec_capped = self._take_groups(self.groups[pool], decode_slots)
        else:
            queue = self.decoding[pool]
            if self.delay is not None and decode_slots and len(queue) > 1:
                queue = self._rebalance(queue, decode_slots, slot, now)
            decodes, dec_pairs, dec_capped = self._take_requests(queue, decode_slots)
            decode_tokens = len(decodes)
        entries: list[tuple[SimRequest, int]] = []
        prefill = prefix_sum = chunk_prefix = chunk_sq = 0
        pairs = capped = 0.0
        lead = lead_chunk = -1
        topk = self.topk
        sampled = decode_tokens
        budget = prefill_budget - decode_tokens if self.decode_in_budget else prefill_budget

        prefilling, waiting = self.prefilling, self.waiting
        admitted = len(prefilling)  # those admitted before this step come first, in order
        next_candidate = 0
        while budget > 0:
            while (
                next_candidate < admitted and prefilling[next_candidate].scheduled >= prefilling[next_candidate].target
            ):
                next_candidate += 1  # all of its prompt is issued
            if next_candidate < admitted:
                q = prefilling[next_candidate]
                next_candidate += 1
                fresh = False
            elif waiting and self._admissible(waiting[0]):
                q = waiting[0]
                fresh = True
            else:
                break
            room = self.kv_capacity - self.kv_used
            if room <= 0:
                break
            chunk = cast(FixedChunk, policy).chunk if self.fixed_chunk else policy.request_chunk(q.scheduled)
            tokens = min(q.target - q.scheduled, budget, chunk, room)
            if fresh:
                waiting.popleft()
                q.seq = self.admitted
                self.admitted += 1
                self.running += 1
                self.pending_prompt += q.target
                self.output_left += q.output - q.emitted
                prefilling.append(q)
            start = q.scheduled
            q.scheduled += tokens
            q.held += tokens
            self.kv_used += tokens
            self.pending_prompt -= tokens
            prefill += tokens
            budget -= tokens
            pairs += tokens * start + tokens * (tokens + 1) / 2
            if topk > 0:
                capped += capped_pairs(start, tokens, topk)
            prefix_sum += start
            chunk_prefix += tokens * start
            chunk_sq += tokens * tokens
            if lead < 0:
                lead, lead_chunk = q.id, q.chunks
            q.chunks += 1
            self.chunks += 1
            if q.scheduled == q.target:
                sampled += 1
                entries.append((q, RESUME if q.emitted else FIRST_TOKEN))
            else:
                entries.append((q, PREFILL))
            if not self.pack_prompts:
                break
        if not entries and not decode_tokens:
            return None

        b = Batch(self.batches, slot, decodes, groups, entries, now)
        self.batches += 1
        b.tokens = decode_tokens + prefill
        b.prefill_tokens = prefill
        b.chunk_prefix, b.chunk_sq, b.decode_context = chunk_prefix, chunk_sq, dec_pairs
        b.lead, b.chunk = lead, lead_chunk
        b.kind = "decode" if not prefill else ("prefill" if not decode_tokens else "mixed")
        shape = BatchShape(
            b.tokens, prefill, pairs, capped, dec_pairs, dec_capped, prefix_sum, sampled, len(entries), self.kv_used
        )
        b.busy, b.comm = self.cost.stage_costs(shape)
        if self.probe is not None:
            self.probe.formed(b)
        return b

    def _take_requests(self, queue: deque[SimRequest], budget: int) -> tuple[list[SimRequest], int, int]:
        """Up to `budget` decodes from the front of `queue`, each taking a token of KV, preempting when the cache is full.

        Returns them and the sums of their contexts, plain and capped at topk.
        """
        taken: list[SimRequest] = []
        pairs = capped = 0
        topk = self.topk
        while budget > 0 and queue:
            q = queue.popleft()
            if self.kv_used >= self.kv_capacity:  # no room for this token's KV
                victim = self._preempt(q, queue)
                if victim is not q:
                    queue.appendleft(q)
                continue
            budget -= 1
            q.held += 1
            self.kv_used += 1
            ctx = q.prompt + q.emitted
            pairs += ctx
            capped += ctx if topk <= 0 or ctx < topk else topk
            taken.append(q)
        return taken, pairs, capped

    def _take_groups(self, queue: list[DecodeGroup], budget: int) -> tuple[list[DecodeGroup], int, int, int]:
        """`_take_requests` a group at a time: the groups taken, their tokens and their context sums.

        A group is split where the budget or the free KV ends inside it; with
        the cache full, the youngest decodable request is preempted.
        """
        taken: list[DecodeGroup] = []
        tokens = pairs = capped = 0
        while budget > 0 and queue:
            room = self.kv_capacity - self.kv_used
            if room <= 0:
                self._preempt_grouped()
                continue
            g = queue[0]
            n = len(g.members)
            k = n if n < budget else budget
            if room < k:
                k = room
            if k < n:
                g = g.split(k)
            else:
                queue.pop(0)
            taken.append(g)
            tokens += k
            budget -= k
            self.kv_used += k
            pairs += g.ctx
            capped += g.capped()
        return taken, tokens, pairs, capped

    def _rebalance(self, queue: deque[SimRequest], take: int, slot: int, now: float) -> deque[SimRequest]:
        """Let delay scheduling hold back some of the decodes about to join this step; returns those that go.

        vLLM semantics, or a single micro-batch: the held requests stay first
        in line for the next step. SGLang semantics: they move to the other
        slots with the fewest running requests and decode there from then on
        (FastPP's batch rebalancing).
        """
        ready = list(queue)
        decoding = self.running - len(self.prefilling)
        assert self.delay is not None
        go, later = self.delay.split(ready[:take], decoding, self.backlog_tokens(), now)
        home = slot if self.sticky else 0
        others = [i for i in range(len(self.decoding)) if i != home]
        if self.sticky and others:
            for q in later:
                q.slot = min(others, key=lambda i: len(self.decoding[i]))
                self.decoding[q.slot].append(q)
            later = []
        self.decoding[home] = deque(later + ready[take:])
        return deque(go)

    def _prompt_work_ready(self) -> bool:
        """Whether a prompt chunk could be scheduled now (a partly prefilled or an admissible request)."""
        if any(q.scheduled < q.target for q in self.prefilling):
            return True
        return bool(self.waiting) and self._admissible(self.waiting[0])

    def _admissible(self, q: SimRequest) -> bool:
        """A running slot is free and the KV cache has room for q's prompt and the reserved outputs."""
        return self.running < self.max_running and self._kv_room() >= self._kv_claim(q)

    def _kv_room(self) -> float:
        """KV tokens free after the admitted prompts and the running outputs' reserve."""
        return self.kv_capacity - self.kv_used - self.pending_prompt - self.output_reserve * self.output_left

    def _kv_claim(self, q: SimRequest) -> float:
        """What admitting q takes of that room: its prompt and its outputs' reserve."""
        return q.target + self.output_reserve * (q.output - q.emitted)

    def _preempt(self, q: SimRequest, queue: deque[SimRequest]) -> SimRequest:
        """Free the KV of the youngest request among q and every decodable one; it waits to recompute."""
        pools = [queue, *(pool for pool in self.decoding if pool is not queue)]
        victim = max([q, *(r for pool in pools for r in pool)], key=lambda r: r.seq)
        for pool in pools:
            if victim in pool:
                pool.remove(victim)
        self._evict(victim)
        return victim

    def _preempt_grouped(self) -> None:
        """`_preempt` on grouped queues: the youngest queued request's group gives it up; its state is written back."""
        victim: SimRequest | None = None
        home = DecodeGroup(0, 0.0)
        home_pool: list[DecodeGroup] = []
        for pool in self.groups:
            for g in pool:
                for q in g.members:
                    if victim is None or q.seq > victim.seq:
                        victim, home, home_pool = q, g, pool
        assert victim is not None, "a decode found the cache full with no request to preempt"
        victim.emitted = home.remove(victim)
        victim.held = victim.prompt + victim.emitted - 1  # a queued request's latest token has no KV yet
        victim.last_token = home.last_token
        if not home.members:
            home_pool.remove(home)
        self._evict(victim)

    def _evict(self, victim: SimRequest) -> None:
        """Free a decodable request's KV; it waits first in line to prefill its prompt and output again."""
        if self.probe is not None:
            self.probe.evicted(victim)
        self.kv_used -= victim.held
        victim.held = victim.scheduled = 0
        victim.target = victim.prompt + victim.emitted
        self.running -= 1
        self.output_left -= victim.output - victim.emitted
        self.preemptions += 1
        self.waiting.appendleft(victim)

    def backlog_tokens(self) -> int:
        """Prompt tokens not yet issued: waiting requests and the rest of partly prefilled ones."""
        return sum(q.target for q in self.waiting) + self.pending_prompt

    def admissible_tokens(self) -> int:
        """The part of the backlog prefill could take now.

        That is the rest of the admitted prompts and the waiting requests, in
        queue order, that admission would let in one after another.
        """
        room, slots, tokens = self._kv_room(), self.max_running - self.running, self.pending_prompt
        for q in self.waiting:
            claim = self._kv_claim(q)
            if slots <= 0 or claim > room:
                break
            room, slots, tokens = room - claim, slots - 1, tokens + q.target
        return tokens

    def complete(self, b: Batch, t: float) -> list[SimRequest]:
        """Emit the tokens of micro-batch b, which left the last stage at t; returns those it finished, in order.

        When the policy learns, `ttfts` and `gaps` then hold the TTFTs the
        step completed and the gap since each decode's previous token.
        """
        learns, slot = self.learns, b.slot
        decoded = b.decoding() if self.probe is not None else None
        finished: list[SimRequest] = []
        ttfts, gaps = self.ttfts, self.gaps
        if learns:
            ttfts.clear()
            gaps.clear()
        group: DecodeGroup | None = None
        pool = slot if self.sticky else 0
        if b.groups:
            if learns:
                for g in b.groups:
                    gaps += [t - g.last_token] * len(g)
            group = merge(b.groups)
            self.output_left -= len(group)
            for q in group.advance():
                q.emitted, q.held = q.output, q.prompt + q.output - 1
                self._retire(q)
                finished.append(q)
        for q in b.decodes:
            if learns:
                gaps.append(t - q.last_token)
            q.last_token = t
            if self._emit(q):
                finished.append(q)
            else:
                self.decoding[q.slot if self.sticky else 0].append(q)
        for q, kind in b.entries:
            if kind == PREFILL:
                continue
            if kind == FIRST_TOKEN:
                q.first_token = t
                if learns:
                    ttfts.append(t - q.arrival)
            elif learns:  # the recompute of a preempted request
                gaps.append(t - q.last_token)
            q.last_token = t
            self.prefilling.remove(q)
            q.slot = slot  # SGLang: a request decodes in the slot whose step emitted its first token
            if self._emit(q):
                finished.append(q)
            elif self.bulk:
                if group is None:
                    group = DecodeGroup(self.topk, t)
                group.add(q)
            else:
                self.decoding[pool].append(q)
        if group is not None and group.members:
            group.last_token = t
            self.groups[pool].append(group)
        if self.probe is not None and decoded is not None:
            self.probe.completed(b, t, decoded, finished)
        return finished

    def _emit(self, q: SimRequest) -> bool:
        """q emits a token; True when that was its last one (it has left the running set)."""
        q.emitted += 1
        self.output_left -= 1
        if q.emitted >= q.output:
            self._retire(q)
            return True
        return False

    def _retire(self, q: SimRequest) -> None:
        """q emitted its last token: its KV and running slot are freed."""
        self.finished_prompt += q.prompt
        self.running -= 1
        self.kv_used -= q.held
        q.held = 0
