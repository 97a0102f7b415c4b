"""The pipeline modes: each one a layout, a transfer discipline, an ordering
rule, a chunk policy and an admission policy. New modes register here; the
engine reads only the `ModeSpec`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .admission import Admission, ContinuousAdmission, DrainPacking, SerialAdmission
from .chunking import ChunkPolicy, DynamicChunk, FixedChunk

if TYPE_CHECKING:
    from ..config import ServingConfig


@dataclass(frozen=True)
class PolicyEnv:
    """What a backend offers policies: a resolved config and its latency probes."""

    config: "ServingConfig"
    chunk_latency: Callable[[int], float]  # profiled latency of a lone chunk of l tokens at prefix 0
    entry_stage_time: Callable[[int, int], float]  # predicted entry-stage time of (tokens, prefix)


@dataclass(frozen=True)
class ModeSpec:
    """How one pipeline mode schedules work."""

    name: str
    summary: str
    layout: str  # "linear" or "foldback"
    sync_transfers: bool  # blocking send/recv that both sides wait for
    extra_in_flight: int  # micro-batches in flight beyond one per rank
    entry_first: bool  # rank 0 runs a new micro-batch's first stage before older last stages
    chunk_policy: Callable[[PolicyEnv], ChunkPolicy]
    admission: Callable[[PolicyEnv], Admission]
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


def _continuous(env: PolicyEnv) -> Admission:
    return ContinuousAdmission()


def _serial(env: PolicyEnv) -> Admission:
    return SerialAdmission()


def _packing(env: PolicyEnv) -> Admission:
    return DrainPacking(env.entry_stage_time)


register_mode(ModeSpec(
    "cpp", "chunked prefill PP: fixed chunks, stage i on rank i",
    "linear", True, 0, False, _fixed, _continuous))
register_mode(ModeSpec(
    "dcpp", "dynamic chunk PP (vLLM-Ascend profiling chunk): later chunks shrink to equal time",
    "linear", True, 0, False, _dcpp, _continuous, ("smooth_factor", "min_chunk")))
register_mode(ModeSpec(
    "vpp-sync", "V-shaped fold-back, blocking transfers, one prompt at a time",
    "foldback", True, 0, False, _fixed, _serial))
register_mode(ModeSpec(
    "vpp-async", "fold-back with overlapped transfers and the entry rank's swapped order",
    "foldback", False, 1, True, _fixed, _serial))
register_mode(ModeSpec(
    "vpp", "vpp-async plus packing of the next prompt's leading chunks into the drain window",
    "foldback", False, 2, True, _fixed, _packing))
