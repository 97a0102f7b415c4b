"""Decoding requests that advance as one: the bulk form of a decode queue.

Requests that emitted their latest token in the same step and decode in
the same micro-batches form a `DecodeGroup`. A step that decodes the group
advances its `clock` by one: every member emits a token, and running sums
(context lengths, and with DSA the contexts capped at `index_topk`) move by
the member count instead of member by member. Each member keeps the clock
at which it emits its final token (`done_at`) and, with DSA, the clock at
which its context reaches the cap (`cap_at`); counts of both per clock tell
a step whether any member changes, so a step costs O(1) per group, plus one
pass over a group in which a member finishes.

While a request is in a group its `emitted` and `held` are not kept up to
date (`emitted(q)` derives the count; `held` follows from it), and a request
leaving its group (finished or preempted) gets both written back. Merging
groups rebases the smaller ones' clocks onto the largest one's.
"""

from __future__ import annotations

from .request import SimRequest


class DecodeGroup:
    """Requests ready to decode (or decoding in one micro-batch), in queue order."""

    __slots__ = ("members", "clock", "ctx", "under", "under_ctx", "done", "caps", "last_token", "topk")

    def __init__(self, topk: int, last_token: float):
        self.members: list[SimRequest] = []
        self.clock = 0  # tokens the group has emitted
        self.ctx = 0  # sum of the members' contexts (prompt + emitted)
        self.under = 0  # members whose context is below topk (DSA)
        self.under_ctx = 0  # their contexts' sum
        self.done: dict[int, int] = {}  # clock -> members emitting their last token then
        self.caps: dict[int, int] = {}  # clock -> members whose context reaches topk then
        self.last_token = last_token  # when every member emitted its previous token
        self.topk = topk

    def __len__(self) -> int:
        return len(self.members)

    def emitted(self, q: SimRequest) -> int:
        """Tokens q has emitted."""
        return q.output - (q.done_at - self.clock)

    def capped(self) -> int:
        """Sum of the members' contexts, each capped at topk keys (the plain sum for dense attention)."""
        topk = self.topk
        return self.ctx if topk <= 0 else self.under_ctx + topk * (len(self.members) - self.under)

    def add(self, q: SimRequest) -> None:
        """Append q, whose `emitted` is up to date, as the last member."""
        clock = self.clock
        q.done_at = done = clock + q.output - q.emitted
        self.done[done] = self.done.get(done, 0) + 1
        ctx = q.prompt + q.emitted
        self.ctx += ctx
        self._count_cap(q, ctx)
        self.members.append(q)

    def _count_cap(self, q: SimRequest, ctx: int) -> None:
        topk, clock = self.topk, self.clock
        if topk > 0 and ctx < topk:
            q.cap_at = cap = clock + topk - ctx
            self.caps[cap] = self.caps.get(cap, 0) + 1
            self.under += 1
            self.under_ctx += ctx
        else:
            q.cap_at = clock

    def advance(self) -> list[SimRequest]:
        """Every member emits one token; returns, in queue order, those that emitted their last one (removed)."""
        n = len(self.members)
        self.clock = clock = self.clock + 1
        self.ctx += n
        if self.under:
            self.under_ctx += self.under
            crossing = self.caps.pop(clock, 0)
            self.under -= crossing
            self.under_ctx -= crossing * self.topk
        if clock not in self.done:
            return []
        del self.done[clock]
        finished: list[SimRequest] = []
        staying: list[SimRequest] = []
        for q in self.members:
            (finished if q.done_at == clock else staying).append(q)
        self.members = staying
        for q in finished:
            ctx = q.prompt + q.output
            self.ctx -= ctx
            if q.cap_at > clock:
                _drop(self.caps, q.cap_at)
                self.under -= 1
                self.under_ctx -= ctx
        return finished

    def remove(self, q: SimRequest) -> int:
        """Take q out of the group (it is preempted); returns the tokens it has emitted."""
        emitted = self.emitted(q)
        self.members.remove(q)
        self._uncount(q, q.prompt + emitted)
        return emitted

    def _uncount(self, q: SimRequest, ctx: int) -> None:
        self.ctx -= ctx
        _drop(self.done, q.done_at)
        if q.cap_at > self.clock:
            _drop(self.caps, q.cap_at)
            self.under -= 1
            self.under_ctx -= ctx

    def split(self, k: int) -> DecodeGroup:
        """Take the first k members out as a group of their own (a step whose budget ends inside this group)."""
        front = DecodeGroup(self.topk, self.last_token)
        front.clock = self.clock
        members, self.members = self.members, self.members[k:]
        for q in members[:k]:
            ctx = q.prompt + self.emitted(q)
            self._uncount(q, ctx)
            front.done[q.done_at] = front.done.get(q.done_at, 0) + 1
            front.ctx += ctx
            if q.cap_at > self.clock:
                front.caps[q.cap_at] = front.caps.get(q.cap_at, 0) + 1
                front.under += 1
                front.under_ctx += ctx
            front.members.append(q)
        return front


def merge(groups: list[DecodeGroup]) -> DecodeGroup:
    """One group of `groups`' members in order; the largest keeps its clock and the others are rebased onto it."""
    if len(groups) == 1:
        return groups[0]
    base = max(groups, key=len)
    members: list[SimRequest] = []
    for g in groups:
        if g is not base:
            shift = base.clock - g.clock
            for q in g.members:
                q.done_at += shift
                q.cap_at += shift
            for clock, count in g.done.items():
                base.done[clock + shift] = base.done.get(clock + shift, 0) + count
            for clock, count in g.caps.items():
                base.caps[clock + shift] = base.caps.get(clock + shift, 0) + count
            base.ctx += g.ctx
            base.under += g.under
            base.under_ctx += g.under_ctx
        members += g.members
    base.members = members
    return base


def _drop(counts: dict[int, int], clock: int) -> None:
    left = counts[clock] - 1
    if left:
        counts[clock] = left
    else:
        del counts[clock]
