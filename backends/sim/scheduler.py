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
How large chunks are and whose prompts may be chunked now is left to the
mode's chunk and admission policies.
"""

from __future__ import annotations

from collections import deque

from ..policies.admission import Admission
from ..policies.chunking import ChunkPolicy
from ..policies.delay import DelayScheduler
from .costs import BatchShape, CostModel, capped_pairs

PREFILL, FIRST_TOKEN, DECODE, RESUME = 0, 1, 2, 3


class SimRequest:
    """A request's progress inside the simulator."""

    __slots__ = ("id", "seq", "arrival", "prompt", "output", "target", "scheduled", "held", "chunks", "emitted",
                 "first_token", "last_token", "finish", "last_busy")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int):
        self.id, self.arrival, self.prompt, self.output = rid, arrival, prompt, output
        self.seq = -1  # admission order
        self.target = prompt  # tokens to prefill: the prompt, plus the generated tokens after a preemption
        self.scheduled = 0  # of target, issued in chunks so far
        self.held = 0  # KV tokens written for it
        self.chunks = 0
        self.emitted = 0
        self.first_token = self.last_token = self.finish = 0.0
        self.last_busy: list[float] | None = None  # stage times of its latest chunk


class Batch:
    """One micro-batch (scheduler step) travelling through the virtual stages."""

    __slots__ = ("id", "entries", "busy", "comm", "stage", "group", "lead", "chunk", "kind",
                 "tokens", "prefill_tokens", "created", "chunk_prefix", "chunk_sq", "decode_context")

    def __init__(self, bid: int, entries: list, created: float):
        self.id, self.entries, self.created = bid, entries, created
        self.stage = 0
        self.busy: list[float] = []
        self.comm: list[float] = []


class StepScheduler:
    """Holds the request queues and builds micro-batches.

    Queues: `waiting` (arrived, not admitted), `prefilling` (admitted, first
    token not out yet, in admission order; its head is the lead request) and
    `decodable` (running requests whose previous token is out).
    """

    def __init__(self, cost: CostModel, chunk_policy: ChunkPolicy, admission: Admission,
                 max_running: int, kv_capacity: int, hops: int, topk: int = 0,
                 delay: DelayScheduler | None = None, decode_in_budget: bool = True,
                 mixed_batches: bool = True, output_reserve: float = 1.0):
        self.cost, self.policy, self.admission = cost, chunk_policy, admission
        self.delay = delay  # decode micro-batch rebalancing, when on
        self.decode_in_budget, self.mixed_batches = decode_in_budget, mixed_batches
        self.hops = hops  # rank-to-rank transfers a micro-batch makes
        self.max_running, self.kv_capacity, self.output_reserve = max_running, kv_capacity, output_reserve
        self.topk = topk  # DSA keys per query (0 = dense attention)
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.decodable: deque[SimRequest] = deque()
        self.running = 0
        self.kv_used = 0
        self.pending_prompt = 0  # tokens admitted requests still have to prefill
        self.output_left = 0  # tokens running requests still have to generate
        self.preemptions = 0
        self.finished_prompt = 0  # prompt tokens of the requests finished so far
        self.admitted = 0
        self.batches = 0
        self.chunks = 0

    def form(self, now: float) -> Batch | None:
        """Build the next micro-batch, or None when there is nothing to run."""
        prefill_budget = self.policy.step_budget()
        if not self.mixed_batches and self._prompt_work_ready():
            decode_slots = 0  # a prefill-only step: decodes wait for the next one
        else:
            decode_slots = prefill_budget if self.decode_in_budget else len(self.decodable)
        budget = decode_slots
        entries: list[tuple[SimRequest, int]] = []
        prefill = pairs = capped = dec_pairs = dec_capped = prefix_sum = chunk_prefix = chunk_sq = 0
        lead = lead_chunk = group = -1
        topk = self.topk
        decodable = self.decodable
        if self.delay is not None and len(decodable) > 1:
            go, later = self.delay.split(list(decodable)[:budget], self.running - len(self.prefilling),
                                         self.backlog_tokens(), now)
            rest = list(decodable)[budget:]
            decodable = deque(go)
            self.decodable = deque(later + rest)  # held back: first in line next step
        while budget > 0 and decodable:
            q = decodable.popleft()
            if self.kv_used >= self.kv_capacity:  # no room for this token's KV
                victim = self._preempt(q, decodable)
                if victim is not q:
                    decodable.appendleft(q)
                continue
            budget -= 1
            q.held += 1
            self.kv_used += 1
            ctx = q.prompt + q.emitted
            dec_pairs += ctx
            dec_capped += ctx if topk <= 0 or ctx < topk else topk
            entries.append((q, DECODE))
        decode_tokens = sampled = len(entries)
        if not self.decode_in_budget or not decode_slots:
            budget = prefill_budget

        prefilling, waiting = self.prefilling, self.waiting
        lead_req = prefilling[0] if prefilling else None
        draining = lead_req is not None and lead_req.scheduled == lead_req.target
        candidates = [q for q in prefilling if q.scheduled < q.target]
        drained_lead = None
        next_candidate = 0
        while budget > 0:
            if next_candidate < len(candidates):
                q = candidates[next_candidate]
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
            is_lead = lead_req is None or q is lead_req
            want = min(q.target - q.scheduled, budget, self.policy.request_chunk(q.scheduled), room)
            tokens = self.admission.allowance(is_lead, draining, want, q.scheduled)
            if tokens <= 0:
                if fresh:
                    break
                continue
            if fresh:
                waiting.popleft()
                q.seq = self.admitted
                self.admitted += 1
                self.running += 1
                self.pending_prompt += q.target
                self.output_left += q.output - q.emitted
                prefilling.append(q)
                if lead_req is None:
                    lead_req = q
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
                lead, lead_chunk, group = q.id, q.chunks, q.seq
            q.chunks += 1
            self.chunks += 1
            if q.scheduled == q.target:
                sampled += 1
                entries.append((q, RESUME if q.emitted else FIRST_TOKEN))
                if q is lead_req:
                    drained_lead = q
            else:
                entries.append((q, PREFILL))
        if not entries:
            return None

        b = Batch(self.batches, entries, now)
        self.batches += 1
        b.tokens = decode_tokens + prefill
        b.prefill_tokens = prefill
        b.chunk_prefix, b.chunk_sq, b.decode_context = chunk_prefix, chunk_sq, dec_pairs
        b.lead, b.chunk = lead, lead_chunk
        b.group = group if group >= 0 else (lead_req.seq if lead_req is not None else self.admitted)
        b.kind = "decode" if not prefill else ("prefill" if not decode_tokens else "mixed")
        shape = BatchShape(b.tokens, prefill, pairs, capped, dec_pairs, dec_capped, prefix_sum, sampled)
        b.busy, b.comm = self.cost.stage_costs(shape)
        if prefill:
            for q, kind in entries:
                if kind != DECODE:
                    prev, q.last_busy = q.last_busy, b.busy
                    if q is drained_lead:
                        self.admission.on_drain(b.busy, prev, self.cost.transfer_time(b.tokens) * self.hops)
        return b

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

    def _preempt(self, q: SimRequest, decodable: deque[SimRequest]) -> SimRequest:
        """Free the KV of the youngest request among q and the decodable ones; it waits to recompute."""
        pools = [decodable] if decodable is self.decodable else [decodable, self.decodable]
        victim = max([q, *(r for pool in pools for r in pool)], key=lambda r: r.seq)
        for pool in pools:
            if victim in pool:
                pool.remove(victim)
        self.kv_used -= victim.held
        victim.held = victim.scheduled = 0
        victim.target = victim.prompt + victim.emitted
        self.running -= 1
        self.output_left -= victim.output - victim.emitted
        self.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

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

    def token_out(self, q: SimRequest, kind: int) -> bool:
        """Record a token emitted for q by an entry of this kind; True when q has finished."""
        if kind != DECODE:
            self.prefilling.remove(q)
        q.emitted += 1
        self.output_left -= 1
        if q.emitted >= q.output:
            self.finished_prompt += q.prompt
            self.running -= 1
            self.kv_used -= q.held
            q.held = 0
            return True
        self.decodable.append(q)
        return False
