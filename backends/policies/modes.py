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

from ..parts import AdaptiveSettings, DcppSettings, FastPPSettings, Scheduling
from .adaptive import AdaptiveChunk
from .chunking import ChunkPolicy, DynamicChunk, FixedChunk
from .fastpp_greedy import GreedyChunkController


@dataclass(frozen=True, kw_only=True)
class PolicyEnv:
    """What a backend offers chunk policies: the parts of a resolved config they read and its latency probes.

    The probes measure the backend itself (the simulator runs its cost model,
    a real engine would time a forward pass), as a start-up profile would.
    """

    pp: int
    scheduling: Scheduling
    dcpp: DcppSettings
    adaptive: AdaptiveSettings
    fastpp: FastPPSettings
    chunk_latency: Callable[[int], float]  # latency of a lone chunk of l tokens at prefix 0, whole pipeline
    entry_stage_time: Callable[[int, int], float]  # entry-stage time of a lone chunk (tokens, prefix)
    decode_stage_time: Callable[[int], float]  # entry-stage time of a decode-only batch of n one-token contexts


@dataclass(frozen=True, kw_only=True)
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
    return FixedChunk(chunk=env.scheduling.chunk)


def _dcpp(env: PolicyEnv) -> ChunkPolicy:
    return DynamicChunk(base=env.scheduling.chunk, settings=env.dcpp, latency=env.chunk_latency)


def _adaptive(env: PolicyEnv) -> ChunkPolicy:
    return AdaptiveChunk(base=env.scheduling.chunk, settings=env.adaptive, stage_time=env.entry_stage_time)


register_mode(
    ModeSpec(
        name="cpp",
        summary="chunked prefill PP: fixed chunks, stage i on rank i",
        layout="linear",
        sync_transfers=True,
        extra_in_flight=0,
        entry_first=False,
        chunk_policy=_fixed,
    )
)
register_mode(
    ModeSpec(
        name="dcpp",
        summary="dynamic chunk PP (vLLM-Ascend profiling chunk): later chunks shrink to equal time",
        layout="linear",
        sync_transfers=True,
        extra_in_flight=0,
        entry_first=False,
        chunk_policy=_dcpp,
    )
)
register_mode(
    ModeSpec(
        name="vpp-sync",
        summary="V-shaped fold-back, blocking transfers in program order, one prompt's chunk per step",
        layout="foldback",
        sync_transfers=True,
        extra_in_flight=1,
        entry_first=False,
        chunk_policy=_fixed,
        pack_prompts=False,
    )
)
register_mode(
    ModeSpec(
        name="vpp-async",
        summary="fold-back with overlapped transfers and the entry rank's swapped order",
        layout="foldback",
        sync_transfers=False,
        extra_in_flight=1,
        entry_first=True,
        chunk_policy=_fixed,
        pack_prompts=False,
    )
)
register_mode(
    ModeSpec(
        name="vpp",
        summary="vpp-async plus cross-request packing: a step's leftover budget takes the next prompts' leading chunks",
        layout="foldback",
        sync_transfers=False,
        extra_in_flight=1,
        entry_first=True,
        chunk_policy=_fixed,
    )
)
register_mode(
    ModeSpec(
        name="vpp-adaptive",
        summary="vpp whose chunks are resized locally when stage times leave the linear law (e.g. DSA)",
        layout="foldback",
        sync_transfers=False,
        extra_in_flight=1,
        entry_first=True,
        chunk_policy=_adaptive,
    )
)


def _fastpp_greedy(env: PolicyEnv) -> ChunkPolicy:
    return GreedyChunkController(pp=env.pp, chunk=env.scheduling.chunk, settings=env.fastpp)


def _fastpp_alp(env: PolicyEnv) -> ChunkPolicy:
    # here, not above: its RLS model loads numpy, which the other modes do without
    from .fastpp_alp import PredictiveChunkController

    return PredictiveChunkController(
        pp=env.pp, scheduling=env.scheduling, settings=env.fastpp, decode_stage_time=env.decode_stage_time
    )


register_mode(
    ModeSpec(
        name="fastpp-greedy",
        summary="FastPP greedy: every pp steps reset, shrink or grow the chunk on free KV and observed TTFT/TPOT",
        layout="linear",
        sync_transfers=False,
        extra_in_flight=0,
        entry_first=False,
        chunk_policy=_fastpp_greedy,
    )
)
register_mode(
    ModeSpec(
        name="fastpp-alp",
        summary="FastPP ALP: the smallest chunk whose RLS-predicted latency keeps TPOT and prefill throughput",
        layout="linear",
        sync_transfers=False,
        extra_in_flight=0,
        entry_first=False,
        chunk_policy=_fastpp_alp,
    )
)
