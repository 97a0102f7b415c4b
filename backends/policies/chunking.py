"""Chunk-size policies: how many prompt tokens a scheduler step may take.

A policy answers two questions each step: the step's token budget (shared by
decodes and prefill chunks, like vLLM's --max-num-batched-tokens) and the
largest chunk one request may take given how much of its prompt is already
scheduled. Policies may learn from completed steps through `observe`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..parts import DcppSettings

ALIGN = 64


@dataclass(frozen=True, slots=True)
class StepReport:
    """What a completed scheduler step tells a policy that learns online.

    Everything here is what a serving engine can measure itself: the step's
    composition, its latency, and the requests' latencies it completed.
    """

    finished_at: float
    latency_s: float  # from creation to completion of the micro-batch
    stage_s: float  # the first virtual stage's execution time (what rank 0 measures)
    prefill_tokens: int
    decode_tokens: int
    chunk_prefix: float  # sum over the step's prefill chunks of chunk x prefix
    chunk_sq: float  # sum of chunk^2
    decode_context: float  # sum of the decodes' context lengths
    ttfts: tuple[float, ...]  # TTFT of each request whose first token this step emitted
    token_gaps: tuple[float, ...]  # for each decode: time since that request's previous token
    kv_free: float  # free fraction of the KV cache after the step
    running: int  # admitted, unfinished requests
    waiting: int  # arrived, not admitted
    backlog_tokens: int  # prompt tokens not yet scheduled (waiting and partly prefilled requests)
    admissible_tokens: int  # the part of the backlog admission lets in now (all of it unless KV or slots block)
    finished_prompt_tokens: int  # prompt tokens of the requests finished so far
    arrived: int  # requests arrived so far


class ChunkPolicy(Protocol):
    """Decides the token budget of each scheduler step."""

    def step_budget(self) -> int: ...

    def request_chunk(self, prefix: int) -> int: ...

    def observe(self, report: StepReport) -> None: ...


class FixedChunk:
    """A fixed per-step token budget (CPP, VPP): every chunk is `chunk` tokens."""

    def __init__(self, *, chunk: int):
        self.chunk = chunk

    def step_budget(self) -> int:
        return self.chunk

    def request_chunk(self, prefix: int) -> int:
        return self.chunk

    def observe(self, report: StepReport) -> None:
        pass


def fit_quadratic(latency: Callable[[int], float], base: int) -> tuple[float, float, float]:
    """Fit f(l) = a l^2 + b l + c to profiled latencies of chunks up to `base` tokens at prefix 0."""
    import numpy as np  # here, not above: only the dynamic chunk fits, and the fixed chunk runs without numpy

    sizes = np.linspace(base / 8, base, 8).round()
    a, b, c = np.polyfit(sizes, [latency(int(s)) for s in sizes], 2)
    return float(a), float(b), float(c)


class DynamicChunk(FixedChunk):
    """vLLM-Ascend's profiling chunk (DCPP): shrink later chunks so each costs about the same.

    With f fitted at start-up, a request with L tokens already prefilled gets
    the x solving f(L + x) - f(L) = f(base) - f(0), smoothed towards base by
    smooth_factor, floored at min_chunk (at most base) and aligned to 64 tokens.
    """

    def __init__(self, *, base: int, settings: DcppSettings, latency: Callable[[int], float]):
        super().__init__(chunk=base)
        self.smooth_factor = settings.smooth_factor
        min_chunk = min(settings.min_chunk, base)
        self.floor = max(ALIGN, -(-min_chunk // ALIGN) * ALIGN)
        self.a, self.b, _ = fit_quadratic(latency, base)
        self._target = self.a * base * base + self.b * base

    def request_chunk(self, prefix: int) -> int:
        a, b, base = self.a, self.b, self.chunk
        if a > 0:
            lin = 2 * a * prefix + b
            x = (math.sqrt(lin * lin + 4 * a * self._target) - lin) / (2 * a)
        else:  # no superlinear growth measured: equal-time chunks are equal-size chunks
            x = base
        x = base + self.smooth_factor * (x - base)
        return max(self.floor, min(base, round(x)) // ALIGN * ALIGN)
