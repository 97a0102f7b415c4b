"""What an engine actually emitted, seen from outside: every token and every micro-batch it formed.

`trace(engine)` sets a probe on the engine's scheduler that logs each
micro-batch formed and each one completed (one token for each of its decodes
and for each prompt it finished prefilling; the engine completes a
micro-batch as it leaves the last stage). `check_tokens` then holds the
engine's request records to the workload's own specs and to that log, so
that nothing is compared with the engine's copy of itself. Tests add their
own watchers to `on_formed` and `on_evicted`.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import NamedTuple

from pipedeck.backends.sim.scheduler import DECODE, FIRST_TOKEN, PREFILL


class Token(NamedTuple):
    request: int
    kind: int  # the scheduler's entry kind: FIRST_TOKEN, DECODE or RESUME
    time: float
    finished: bool  # the scheduler counted the request finished with it


class Trace:
    """A scheduler probe: the tokens emitted, the prompt tokens scheduled, and watchers of its own."""

    def __init__(self) -> None:
        self.tokens: list[Token] = []
        self.prefill_tokens = 0  # prompt tokens over every micro-batch formed
        self.on_formed: list[Callable] = []  # called with each micro-batch formed
        self.on_evicted: list[Callable] = []  # called with each request about to be preempted

    def formed(self, batch) -> None:
        self.prefill_tokens += batch.prefill_tokens
        for watch in self.on_formed:
            watch(batch)

    def completed(self, batch, t, decoded, finished) -> None:
        done = {q.id for q in finished}
        sampled = [(q, DECODE) for q in decoded] + [(q, k) for q, k in batch.entries if k != PREFILL]
        self.tokens.extend(Token(q.id, kind, t, q.id in done) for q, kind in sampled)

    def evicted(self, q) -> None:
        for watch in self.on_evicted:
            watch(q)


def trace(engine) -> Trace:
    """Log every token the engine emits and every prompt token it schedules; returns the (filling) log."""
    log = Trace()
    engine.sched.probe = log
    return log


def check_tokens(log: Trace, records, requests, preemptions: int = 0, exits=None) -> None:
    """Every request got exactly its output tokens, one first token, nothing after its finish, one record.

    `requests` are the workload's specs; `exits`, when given, the times
    micro-batches left the last stage (from the timeline), at which alone
    tokens may come out.
    """
    ids = Counter(r.id for r in records)
    assert set(ids) == {q.id for q in requests}, "a request has no record, or a record no request"
    assert max(ids.values()) == 1, [i for i, n in ids.items() if n > 1]
    by_id = {r.id: r for r in records}
    emitted = defaultdict(list)
    for token in log.tokens:
        emitted[token.request].append(token)
    for q in requests:
        tokens, rec = emitted[q.id], by_id[q.id]
        assert len(tokens) == q.output_tokens, (q.id, len(tokens), q.output_tokens)
        assert [t.kind == FIRST_TOKEN for t in tokens] == [True] + [False] * (len(tokens) - 1), q.id
        times = [t.time for t in tokens]
        assert all(a < b for a, b in itertools.pairwise(times)), q.id  # one token per micro-batch that leaves
        assert [t.finished for t in tokens] == [False] * (len(tokens) - 1) + [True], q.id
        assert rec.first_token_s == times[0] and rec.finish_s == times[-1], q.id  # nothing after the finish
        assert times[0] > rec.arrival_s, q.id
        if exits is not None:
            assert set(times) <= exits, q.id
    prompts = sum(q.prompt_tokens for q in requests)
    if preemptions:  # a preempted request prefills its prompt and generated tokens again
        assert log.prefill_tokens > prompts
    else:
        assert log.prefill_tokens == prompts
