"""The pipeline modes: each one a layout, a transfer discipline, an ordering
rule, a chunk policy and whether a step packs several prompts. New modes
register here; the engine reads only the `ModeSpec`.

Every mode schedules as a continuous-batching engine does (one token budget
per step, decodes of many requests in every micro-batch, the same admission,
KV accounting and preemption): the fold-back modes change where stages run,
how transfers block and how many micro-batches are in flight, not how many
requests a micro-batch may hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .adaptive import AdaptiveChunk
from .chunking import ChunkPolicy, DynamicChunk, FixedChunk
from .fastpp_greedy import GreedyChunkController

if TYPE_CHECKING:
    from ..config import ResolvedConfig


@dataclass(frozen=True)
class PolicyEnv:
    """What a backend offers policies: a resolved config and its latency probes.

    The probes measure the backend itself (the simulator runs its cost model,
    a real engine would time a forward pass), as a start-up profile would.
    """

    config: ResolvedConfig
    chunk_latency: Callable[[int], float]  # latency of a lone chunk of l tokens at prefix 0, whole pipeline
    entry_stage_time: Callable[[int, int], float]  # entry-stage time of a lone chunk (tokens, prefix)
    decode_stage_time: Callable[[int], float]  # entry-stage time of a decode-only batch of n one-token contexts


@dataclass(frozen=True)
class ModeSpec:
    """How one pipeline mode schedules work."""

    name: str
    summary: str
    layout: str  # "linear" or "foldback"
    sync_transfers: bool  # blocking send/recv that both sides wait for
    extra_in_flight: int  # micro-batches in flight beyond one per rank
    entry_first: bool  # rank 0 runs a new micro-batch's first stage before an older one's last (VPP-Async)
    chunk_policy: Callable[[PolicyEnv], ChunkPolicy]
    pack_prompts: bool = True  # a step's budget left after one prompt's chunk takes the next prompts' chunks
    params: tuple[str, ...] = ()  # config fields only this mode reads

    @property
    def virtual_stages(self) -> int:
        """Virtual stages per rank."""
        return 2 if self.layout == "foldback" else 1


MODES: dict[str, ModeSpec] = {}


def register_mode(spec: ModeSpec) -> ModeSpec:
    """Make a mode available to configs, the engine, the CLI and the tuner."""
    MODES[spec.name] = spec
    return spec


def _fixed(env: PolicyEnv) -> ChunkPolicy:
    return FixedChunk(env.config.chunk)


def _dcpp(env: PolicyEnv) -> ChunkPolicy:
    c = env.config
    return DynamicChunk(c.chunk, c.smooth_factor, min(c.min_chunk, c.chunk), env.chunk_latency)


def _adaptive(env: PolicyEnv) -> ChunkPolicy:
    c = env.config
    return AdaptiveChunk(c.chunk, c.adaptive_threshold, c.adaptive_fit_chunks, env.entry_stage_time)


register_mode(ModeSpec("cpp", "chunked prefill PP: fixed chunks, stage i on rank i", "linear", True, 0, False, _fixed))
register_mode(
    ModeSpec(
        "dcpp",
        "dynamic chunk PP (vLLM-Ascend profiling chunk): later chunks shrink to equal time",
        "linear",
        True,
        0,
        False,
        _dcpp,
        params=("smooth_factor", "min_chunk"),
    )
)
register_mode(
    ModeSpec(
        "vpp-sync",
        "V-shaped fold-back, blocking transfers in program order, one prompt's chunk per step",
        "foldback",
        True,
        1,
        False,
        _fixed,
        pack_prompts=False,
    )
)
register_mode(
    ModeSpec(
        "vpp-async",
        "fold-back with overlapped transfers and the entry rank's swapped order",
        "foldback",
        False,
        1,
        True,
        _fixed,
        pack_prompts=False,
    )
)
register_mode(
    ModeSpec(
        "vpp",
        "vpp-async plus cross-request packing: a step's leftover budget takes the next prompts' leading chunks",
        "foldback",
        False,
        1,
        True,
        _fixed,
    )
)
register_mode(
    ModeSpec(
        "vpp-adaptive",
        "vpp whose chunks are resized locally when stage times leave the linear law (e.g. DSA)",
        "foldback",
        False,
        1,
        True,
        _adaptive,
        params=("adaptive_threshold", "adaptive_fit_chunks"),
    )
)


def _fastpp_greedy(env: PolicyEnv) -> ChunkPolicy:
    return GreedyChunkController(env.config)


def _fastpp_alp(env: PolicyEnv) -> ChunkPolicy:
    # here, not above: its RLS model loads numpy, which the other modes do without
    from .fastpp_alp import PredictiveChunkController

    return PredictiveChunkController(env)


register_mode(
    ModeSpec(
        "fastpp-greedy",
        "FastPP greedy: every pp steps reset, shrink or grow the chunk on free KV and observed TTFT/TPOT",
        "linear",
        False,
        0,
        False,
        _fastpp_greedy,
        params=(
            "slo_ttft_s",
            "slo_tpot_s",
            "controller_min_chunk",
            "controller_base_chunk",
            "controller_step",
            "kv_free_threshold",
            "tpot_violation",
            "ttft_low",
            "ttft_high",
            "tpot_safe",
        ),
    )
)
register_mode(
    ModeSpec(
        "fastpp-alp",
        "FastPP ALP: the smallest chunk whose RLS-predicted latency keeps TPOT and prefill throughput",
        "linear",
        False,
        0,
        False,
        _fastpp_alp,
        params=(
            "slo_tpot_s",
            "controller_min_chunk",
            "controller_step",
            "alp_window_s",
            "slo_tpot_coeff",
            "rls_forgetting",
        ),
    )
)
