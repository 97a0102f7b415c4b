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
"""

from __future__ import annotations

from collections import deque

from ..policies.chunking import ChunkPolicy
from ..policies.delay import DelayScheduler
from .costs import BatchShape, CostModel, capped_pairs

PREFILL, FIRST_TOKEN, DECODE, RESUME = 0, 1, 2, 3


class SimRequest:
    """A request's progress inside the simulator."""

    __slots__ = ("id", "seq", "arrival", "prompt", "output", "target", "scheduled", "held", "chunks", "emitted",
                 "first_token", "last_token", "finish", "slot")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int):
        self.id, self.arrival, self.prompt, self.output = rid, arrival, prompt, output
        self.seq = -1  # admission order
        self.target = prompt  # tokens to prefill: the prompt, plus the generated tokens after a preemption
        self.scheduled = 0  # of target, issued in chunks so far
        self.held = 0  # KV tokens written for it
        self.chunks = 0
        self.emitted = 0
        self.first_token = self.last_token = self.finish = 0.0
        self.slot = 0  # the micro-batch slot it decodes in (SGLang semantics)


class Batch:
    """One micro-batch (scheduler step) travelling through the virtual stages."""

    __slots__ = ("id", "slot", "entries", "busy", "comm", "stage", "lead", "chunk", "kind",
                 "tokens", "prefill_tokens", "created", "chunk_prefix", "chunk_sq", "decode_context")

    def __init__(self, bid: int, slot: int, entries: list, created: float):
        self.id, self.slot, self.entries, self.created = bid, slot, entries, created
        self.stage = 0
        self.busy: list[float] = []
        self.comm: list[float] = []


class StepScheduler:
    """Holds the request queues and builds micro-batches.

    Queues: `waiting` (arrived, not admitted), `prefilling` (admitted, first
    token not out yet, in admission order) and `decoding`, one queue of
    running requests whose previous token is out per micro-batch slot (one
    queue shared by every slot unless `sticky_decodes`).
    """

    def __init__(self, cost: CostModel, chunk_policy: ChunkPolicy, max_running: int, kv_capacity: int,
                 slots: int, topk: int = 0, delay: DelayScheduler | None = None, decode_in_budget: bool = True,
                 mixed_batches: bool = True, output_reserve: float = 1.0, pack_prompts: bool = True,
                 sticky_decodes: bool = False):
        self.cost, self.policy = cost, chunk_policy
        self.delay = delay  # decode micro-batch rebalancing, when on
        self.decode_in_budget, self.mixed_batches = decode_in_budget, mixed_batches
        self.pack_prompts, self.sticky = pack_prompts, sticky_decodes
        self.max_running, self.kv_capacity, self.output_reserve = max_running, kv_capacity, output_reserve
        self.topk = topk  # DSA keys per query (0 = dense attention)
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.decoding: list[deque[SimRequest]] = [deque() for _ in range(slots if sticky_decodes else 1)]
        self.running = 0
        self.kv_used = 0
        self.pending_prompt = 0  # tokens admitted requests still have to prefill
        self.output_left = 0  # tokens running requests still have to generate
        self.preemptions = 0
        self.finished_prompt = 0  # prompt tokens of the requests finished so far
        self.admitted = 0
        self.batches = 0
        self.chunks = 0

    def form(self, now: float, slot: int = 0) -> Batch | None:
        """Build the next micro-batch for a free slot, or None when there is nothing to run."""
        prefill_budget = self.policy.step_budget()
        queue = self.decoding[slot] if self.sticky else self.decoding[0]
        if not self.mixed_batches and self._prompt_work_ready():
            decode_slots = 0  # a prefill-only step: decodes wait for the next one
        elif self.sticky:
            decode_slots = len(queue)  # the slot's whole running batch
        else:
            decode_slots = prefill_budget if self.decode_in_budget else len(queue)
        if self.delay is not None and decode_slots and len(queue) > 1:
            queue = self._rebalance(queue, decode_slots, slot, now)
        entries: list[tuple[SimRequest, int]] = []
        prefill = pairs = capped = dec_pairs = dec_capped = prefix_sum = chunk_prefix = chunk_sq = 0
        lead = lead_chunk = -1
        topk = self.topk
        budget = decode_slots
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
            dec_pairs += ctx
            dec_capped += ctx if topk <= 0 or ctx < topk else topk
            entries.append((q, DECODE))
        decode_tokens = sampled = len(entries)
        budget = prefill_budget - decode_tokens if self.decode_in_budget else prefill_budget

        prefilling, waiting = self.prefilling, self.waiting
        candidates = [q for q in prefilling if q.scheduled < q.target]
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
            tokens = min(q.target - q.scheduled, budget, self.policy.request_chunk(q.scheduled), room)
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
        if not entries:
            return None

        b = Batch(self.batches, slot, entries, now)
        self.batches += 1
        b.tokens = decode_tokens + prefill
        b.prefill_tokens = prefill
        b.chunk_prefix, b.chunk_sq, b.decode_context = chunk_prefix, chunk_sq, dec_pairs
        b.lead, b.chunk = lead, lead_chunk
        b.kind = "decode" if not prefill else ("prefill" if not decode_tokens else "mixed")
        shape = BatchShape(b.tokens, prefill, pairs, capped, dec_pairs, dec_capped, prefix_sum, sampled,
                           len(entries) - decode_tokens)
        b.busy, b.comm = self.cost.stage_costs(shape)
        return b

    def _rebalance(self, queue: deque[SimRequest], take: int, slot: int, now: float) -> deque[SimRequest]:
        """Let delay scheduling hold back some of the decodes about to join this step; returns those that go.

        vLLM semantics, or a single micro-batch: the held requests stay first
        in line for the next step. SGLang semantics: they move to the other
        slots with the fewest running requests and decode there from then on
        (FastPP's batch rebalancing).
        """
        ready = list(queue)
        decoding = self.running - len(self.prefilling)
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

    def token_out(self, q: SimRequest, kind: int, slot: int = 0) -> bool:
        """Record a token emitted for q by an entry of this kind in a step of `slot`; True when q has finished."""
        if kind != DECODE:
            self.prefilling.remove(q)
            q.slot = slot  # SGLang: a request decodes in the slot whose step emitted its first token
        q.emitted += 1
        self.output_left -= 1
        if q.emitted >= q.output:
            self.finished_prompt += q.prompt
            self.running -= 1
            self.kv_used -= q.held
            q.held = 0
            return True
        self.decoding[q.slot if self.sticky else 0].append(q)
        return False
