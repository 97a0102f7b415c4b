"""A toy cost model for engine tests: every virtual stage of chunk k takes (k+1)*t, transfers are free."""

from __future__ import annotations

import itertools

from pipedeck.backends import TRANSFER_KINDS, ServingConfig
from pipedeck.backends.sim.backend import build_engine
from pipedeck.backends.sim.costs import StageCosts
from pipedeck.backends.sim.request import SimRequest

CHUNK = 1024


class LinearChunkCost(StageCosts):
    """tau_k = (k + 1) * t on every virtual stage (times its weight), where k = prefix // CHUNK.

    Transfers take `transfer` seconds whatever their size.
    """

    def __init__(self, stages: int, t: float = 1.0, weights: tuple[float, ...] | None = None, transfer: float = 0.0):
        super().__init__()
        self.weights = weights or (1.0,) * stages
        self.t, self.transfer = t, transfer

    def stage_costs(self, shape):
        tau = (shape.prefix_tokens // CHUNK + 1) * self.t
        return [tau * w for w in self.weights], [0.0] * len(self.weights)

    def transfer_time(self, tokens: int) -> float:
        return self.transfer


def run_toy(mode: str, chunks_per_request: list[float], pp: int = 2, **cost):
    """Run requests of the given chunk counts (fractions make short prompts), all queued at t=0, under the toy cost."""
    config = ServingConfig.of(
        model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=pp, mode=mode, chunk=CHUNK
    ).resolve()
    engine = build_engine(config, timeline=True, cost=LinearChunkCost(len(config.parallelism.layer_split), **cost))
    requests = [SimRequest(i, 0.0, int(n * CHUNK), 1) for i, n in enumerate(chunks_per_request)]
    engine.run(requests, None)
    return engine, sorted(engine.span_list(), key=lambda s: (s.rank, s.start))


def compute_spans(spans, rank):
    """The compute blocks of one rank, in time order."""
    return [s for s in spans if s.rank == rank and s.kind not in TRANSFER_KINDS]


def gaps(spans):
    """Idle gaps between consecutive blocks."""
    return [b.start - a.end for a, b in itertools.pairwise(spans)]


class ChunkShapeCost(StageCosts):
    """tau(c, L) = t * (c / CHUNK) * g(position of the chunk's middle, in chunks): linear g gives the linear law."""

    def __init__(self, stages: int, g, t: float = 1.0):
        super().__init__()
        self.stages, self.g, self.t = stages, g, t

    def stage_costs(self, shape):
        middle = (shape.prefix_tokens + shape.prefill_tokens / 2) / CHUNK
        tau = self.t * shape.prefill_tokens / CHUNK * self.g(middle)
        return [tau] * self.stages, [0.0] * self.stages

    def transfer_time(self, tokens: int) -> float:
        return 0.0


def run_shaped(mode: str, chunks: int, g, pp: int = 2):
    """One prompt of `chunks` full chunks under ChunkShapeCost."""
    config = ServingConfig.of(
        model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=pp, mode=mode, chunk=CHUNK
    ).resolve()
    engine = build_engine(config, timeline=True, cost=ChunkShapeCost(len(config.parallelism.layer_split), g))
    engine.run([SimRequest(0, 0.0, chunks * CHUNK, 1)], None)
    return engine, sorted(engine.span_list(), key=lambda s: (s.rank, s.start))
