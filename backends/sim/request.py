"""`SimRequest`: a request's progress inside the simulator, which the scheduler and the decode groups both move on."""

from __future__ import annotations


class SimRequest:
    """A request's progress inside the simulator."""

    __slots__ = (
        "id",
        "seq",
        "arrival",
        "prompt",
        "output",
        "target",
        "scheduled",
        "held",
        "chunks",
        "emitted",
        "first_token",
        "last_token",
        "finish",
        "slot",
        "done_at",
        "cap_at",
    )

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
        self.done_at = self.cap_at = 0  # in a DecodeGroup: its clock at the last token, and at the DSA cap
