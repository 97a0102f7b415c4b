"""FastPP's predictive chunk controller (ALP): pick each step's chunk from a learned latency model.

Stage latency of a step (what the entry rank measures, StepReport.stage_s):

    tau = L(N) + theta . [chunk x prefix / 1e6, chunk^2 / 1e6, decode context / 1e6, eager]

L, the linear-layer cost of a step of N tokens, comes from an offline
profile of the backend itself: decode-only batches of n one-token contexts
(decode_stage_time) at every PROFILE_STEP tokens up to the largest step,
interpolated. Such a batch has no prefill chunk, so no chunk-vs-prefix or
within-chunk attention, and its decodes read one key each: its time is the
linear layers (projections, FFN) plus per-step constants. A table rather
than FastPP's line a0 + a1 N: the line cannot follow the weight-read floor
of small steps nor the matmul-tile steps, and then the controller takes
small chunks for cheaper than they are. eager is 1 for a step that carries
prefill: the profile's decode-only batches replay a captured graph, mixed
steps launch their kernels eagerly. theta (milliseconds per unit) is learned
online by recursive least squares on the residual stage_s - L(N).

The controller re-chooses the chunk (the step's token budget) among
controller_min_chunk..chunk in controller_step steps once per pipeline
round, every pp completed steps, as the greedy controller does: the pp
micro-batches of a round then have the same budget, so the stages pass them
on without the bubbles that a small micro-batch behind a large one leaves
(re-choosing every step cost 5% of goodput in calibration B).
It learns from every step. A step with budget c is predicted to hold the
last step's decodes d (at most c when decodes count against the budget,
with their context sum scaled alike) and a prefill chunk of p = c - d
tokens (p = c when they do not) at the last step's mean prefill prefix
(chunk_prefix / prefill_tokens; 0 if it had no prefill). Predicted TPOT =
pp x tau(c): with pp micro-batches in flight a decode's next token waits for
pp steps on every rank. Prefill throughput = p / tau(c) (the pipeline
finishes a step every tau). Demand = arrival rate x mean prompt length over
the last alp_window_s seconds plus backlog / alp_window_s; while admission
is blocked (KV cache or running slots full), prefill can take no more than
admission lets in: the finished requests' prompt tokens per second plus the
admissible part of the backlog / alp_window_s. Chosen: the smallest chunk
with pp tau <= slo_tpot_coeff x slo_tpot_s and throughput >= demand; else
the largest that keeps TPOT; else the smallest.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..parts import FastPPSettings, Scheduling
from .chunking import StepReport
from .rls import RecursiveLeastSquares

PROFILE_STEP = 16  # tokens between profiled step sizes
PAIR_UNIT = 1e6  # attention features in millions of token pairs
RESIDUAL_UNIT = 1e3  # residuals in milliseconds, so features and coefficients are of order one


class _Sample(NamedTuple):
    """What the arrival estimate keeps of one completed step."""

    at: float
    arrived: int
    backlog: int
    admissible: int  # the part of the backlog admission lets in now
    finished: int  # prompt tokens of the requests finished so far
    prefilled: int  # prompt tokens of all steps completed so far


class PredictiveChunkController:
    """ALP: the smallest chunk that keeps both the TPOT SLO and prefill throughput, by a learned model."""

    def __init__(
        self, *, pp: int, scheduling: Scheduling, settings: FastPPSettings, decode_stage_time: Callable[[int], float]
    ):
        c, chunk = settings, scheduling.chunk
        self.pp, self.window_s = pp, c.alp_window_s
        self.tpot_budget = c.slo_tpot_coeff * c.slo_tpot_s
        self.shared_budget = scheduling.decode_in_budget  # decodes take part of the chunk budget (vLLM) or not (SGLang)
        low = min(c.controller_min_chunk, chunk)
        self.candidates = list(range(low, chunk + 1, c.controller_step))
        largest = chunk + scheduling.max_running  # a step's tokens: its chunk and at most every running decode
        sizes = np.array([1, *range(PROFILE_STEP, largest + PROFILE_STEP, PROFILE_STEP)])
        probed = [decode_stage_time(int(n)) for n in sizes]
        # interpolated once at every token count: linear() runs several times a step
        self._linear = np.interp(np.arange(sizes[-1] + 1), sizes, probed)
        self.model = RecursiveLeastSquares(4, c.rls_forgetting)
        self._decodes, self._context, self._prefix = 0, 0.0, 0.0
        self._samples: deque[_Sample] = deque()
        self._prefilled = 0
        self._ape_sum, self._seen = 0.0, 0
        self._steps = 0
        self.chunk = self._choose()
        self.history = [self.chunk]  # the chunk in force after each decision, the start first

    @property
    def mape(self) -> float:
        """Mean absolute percentage error (%) of the stage-latency prediction made before each update."""
        return 100 * self._ape_sum / self._seen if self._seen else math.nan

    def step_budget(self) -> int:
        return self.chunk

    def request_chunk(self, prefix: int) -> int:
        return self.chunk

    def linear(self, tokens: int) -> float:
        """The profiled linear-layer seconds of a step of `tokens` tokens (held beyond the largest probe)."""
        table = self._linear
        return float(table[min(tokens, len(table) - 1)])

    def predict(self, prefill: int, decodes: int, chunk_prefix: float, chunk_sq: float, decode_context: float) -> float:
        """Predicted entry-stage seconds of a step with this composition."""
        x = self._features(prefill, chunk_prefix, chunk_sq, decode_context)
        return self.linear(prefill + decodes) + self.model.predict(x) / RESIDUAL_UNIT

    def observe(self, report: StepReport) -> None:
        r = report
        x = self._features(r.prefill_tokens, r.chunk_prefix, r.chunk_sq, r.decode_context)
        linear = self.linear(r.prefill_tokens + r.decode_tokens)
        if r.stage_s > 0:  # score the prediction made before this step's update
            predicted = linear + self.model.predict(x) / RESIDUAL_UNIT
            self._ape_sum += abs(predicted - r.stage_s) / r.stage_s
            self._seen += 1
        self.model.update(x, (r.stage_s - linear) * RESIDUAL_UNIT)
        self._decodes, self._context = r.decode_tokens, r.decode_context
        self._prefix = r.chunk_prefix / r.prefill_tokens if r.prefill_tokens else 0.0
        self._prefilled += r.prefill_tokens
        self._samples.append(
            _Sample(
                r.finished_at,
                r.arrived,
                r.backlog_tokens,
                r.admissible_tokens,
                r.finished_prompt_tokens,
                self._prefilled,
            )
        )
        while self._samples[0].at < r.finished_at - self.window_s:
            self._samples.popleft()
        self._steps += 1
        if self._steps % self.pp == 0:
            self.chunk = self._choose()
        self.history.append(self.chunk)

    def demand(self) -> float:
        """Prompt tokens per second prefill must sustain: what enters the backlog + backlog / window.

        While admission is blocked (the KV cache or the running slots are
        full), prefill can only take what admission lets in: requests enter
        as others finish, so the inflow is the finished requests' prompt
        tokens per second, and the backlog is its admissible part.
        """
        if not self._samples:
            return 0.0
        old, new = self._samples[0], self._samples[-1]
        span = new.at - old.at
        if new.admissible < new.backlog:
            inflow = (new.finished - old.finished) / span if span > 0 else 0.0
            return inflow + new.admissible / self.window_s
        arrivals = new.arrived - old.arrived
        inflow = 0.0
        if span > 0 and arrivals > 0:
            # prompt tokens that arrived = backlog growth + what prefill took meanwhile
            mean_prompt = max(0, new.backlog - old.backlog + new.prefilled - old.prefilled) / arrivals
            inflow = arrivals / span * mean_prompt
        return inflow + new.backlog / self.window_s

    def _choose(self) -> int:
        """The smallest chunk meeting TPOT and demand; else the largest meeting TPOT; else the smallest."""
        demand = self.demand()
        t_prefix, t_sq, t_context, t_eager = (self.model.coefficients / RESIDUAL_UNIT).tolist()
        context_each = self._context / self._decodes if self._decodes else 0.0
        keeps_tpot = []
        shared = self.shared_budget
        for c in self.candidates:  # predict(), unrolled: this runs every step
            decodes = min(self._decodes, c) if shared else self._decodes
            prefill = c - decodes if shared else c
            attention = (
                t_prefix * prefill * self._prefix + t_sq * prefill * prefill + t_context * decodes * context_each
            ) / PAIR_UNIT
            stage = self.linear(prefill + decodes) + attention + (t_eager if prefill else 0.0)
            if self.pp * stage > self.tpot_budget:
                continue
            if prefill >= demand * stage:
                return c
            keeps_tpot.append(c)
        return keeps_tpot[-1] if keeps_tpot else self.candidates[0]

    @staticmethod
    def _features(prefill: int, chunk_prefix: float, chunk_sq: float, decode_context: float) -> np.ndarray:
        eager = 1.0 if prefill else 0.0
        return np.array([chunk_prefix / PAIR_UNIT, chunk_sq / PAIR_UNIT, decode_context / PAIR_UNIT, eager])
