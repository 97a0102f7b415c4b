"""The serving config's parts, one frozen dataclass per concern, and the knobs each declares.

A part's knob fields are declared once with `knob()` (backends/knobs.py):
type, default, range, help, the modes that read it, how the tuner searches
it and how each engine spells it. `ServingConfig` holds one instance of each
part (`config.scheduling`, `config.dcpp`, ...) and hands each simulator
component the part it needs, by keyword.

Fields without a `knob()` declaration are structural: the cluster shape and
the KV capacity, each validated by `ServingConfig.resolve()` itself, which
fills in what is derived from them (`ResolvedParallelism`, `ResolvedMemory`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .knobs import EngineFlag, Search, knob, register_part

FASTPP_GREEDY, FASTPP_ALP = "fastpp-greedy", "fastpp-alp"
FASTPP_MODES = (FASTPP_GREEDY, FASTPP_ALP)


def _fastpp_default(value: object) -> dict[str, EngineFlag]:
    """The FastPP fork takes this knob from its own config, whose default is `value` (no launch option)."""
    return {"fastpp": EngineFlag(default=value)}


@dataclass(frozen=True)
class Parallelism:
    """The cluster shape: tensor and pipeline parallel sizes, virtual stages per rank and layers per stage.

    `layer_split` lists layer counts per virtual stage in execution order;
    it and `virtual_stages` are derived when left as None.
    """

    tp: int = 8
    pp: int = 2
    virtual_stages: int | None = None
    layer_split: tuple[int, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class ResolvedParallelism:
    """The cluster shape as resolved: the same fields as `Parallelism`, the derived ones filled in."""

    tp: int
    pp: int
    virtual_stages: int
    layer_split: tuple[int, ...]


@dataclass(frozen=True)
class Scheduling:
    """The step scheduler: token budget, running cap, which decodes share a step, and KV admission."""

    chunk: int = knob(
        8192,
        kind="tokens",
        unit="tokens",
        low=1,
        help="Chunk size / step token budget (24k, 24K or 24576).",
        engines={
            "vllm": EngineFlag(flags=("--max-num-batched-tokens",), with_flags=("--enable-chunked-prefill",)),
            "sglang": EngineFlag(flags=("--chunked-prefill-size",)),
            # llama.cpp common/common.h common_params: n_batch 2048
            "llama-server": EngineFlag(flags=("--batch-size", "--ubatch-size"), default=2048),
        },
    )
    max_running: int = knob(
        256,
        kind="int",
        unit="requests",
        low=1,
        help="Max running requests (--max-num-seqs).",
        engines={
            "vllm": EngineFlag(flags=("--max-num-seqs",)),
            # the request pool caps it, at most 4096 (model_runner: min(max(tokens / context * 512, 2048), 4096))
            "sglang": EngineFlag(flags=("--max-running-requests",), default=4096),
            "fastpp": EngineFlag(default=4096),  # spelled as SGLang; the fork's base, 0.4.1, sizes the pool alike
            # slots: the requests it decodes at once; tools/server: n_parallel -1 (auto) gives 4
            "llama-server": EngineFlag(flags=("--parallel",), default=4),
        },
    )
    decode_in_budget: bool = knob(
        True, kind="bool", help="Decodes count against the chunk budget (vLLM, SGLang --enable-mixed-chunk: on)."
    )
    mixed_batches: bool = knob(
        True,
        kind="bool",
        help="Steps mix decodes with prefill chunks (vLLM, SGLang --enable-mixed-chunk: on).",
        engines={"sglang": EngineFlag(flags=("--enable-mixed-chunk",))},
    )
    sticky_decodes: bool = knob(
        False,
        kind="bool",
        help="Each request decodes in the micro-batch it joined, whose every step decodes its "
        "whole running batch (SGLang's PP scheduler: on; vLLM: off).",
    )
    output_reserve: float = knob(
        1.0,
        kind="float",
        low=0,
        high=1,
        help="KV admission keeps this share of running outputs free (1: never preempt; SGLang settles at 0.098, vLLM 0).",
    )


@dataclass(frozen=True)
class Memory:
    """KV cache capacity in tokens (derived from device memory when None)."""

    kv_capacity: int | None = None


@dataclass(frozen=True, kw_only=True)
class ResolvedMemory:
    """KV cache capacity in tokens, as given or derived from device memory."""

    kv_capacity: int


@dataclass(frozen=True)
class DcppSettings:
    """DCPP, vLLM-Ascend's profiling chunk: later chunks shrink to equal time."""

    smooth_factor: float = knob(
        1.0,
        kind="float",
        low=0,
        high=1,
        low_open=True,
        modes=("dcpp",),
        help="DCPP: pull dynamic chunks towards the base chunk, in (0, 1].",
        search=Search(low=0.1, high=1.0),
        engines={
            "vllm-ascend": EngineFlag(set_by="--additional-config profiling_chunk_config.smooth_factor", default=1.0),
            "sglang": EngineFlag(set_by="env SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR", default=0.75),
        },
    )
    min_chunk: int = knob(
        4096,
        kind="tokens",
        unit="tokens",
        low=1,
        modes=("dcpp",),
        help="DCPP: smallest dynamic chunk (tokens).",
        search=Search(low=1024, high=16384, step=1024),
        engines={
            "vllm-ascend": EngineFlag(set_by="--additional-config profiling_chunk_config.min_chunk", default=4096)
        },
    )


@dataclass(frozen=True)
class FastPPSettings:
    """FastPP's chunk controllers (the fastpp-* modes; `chunk` is their largest chunk); defaults are FastPP's.

    Their SLO targets come from the study's SLO when tuning, not the search.
    """

    slo_ttft_s: float = knob(
        2.0,
        kind="float",
        unit="s",
        low=0,
        low_open=True,
        modes=(FASTPP_GREEDY,),
        help="FastPP controllers: the TTFT target they steer by (s).",
    )
    slo_tpot_s: float = knob(
        0.2,
        kind="float",
        unit="s",
        low=0,
        low_open=True,
        modes=FASTPP_MODES,
        help="FastPP controllers: the TPOT target they steer by (s).",
    )
    kv_free_threshold: float = knob(
        0.10,
        kind="float",
        low=0,
        high=1,
        modes=(FASTPP_GREEDY,),
        help="FastPP greedy: free-KV fraction below which chunks reset small.",
        search=Search(low=0.02, high=0.3),
        engines=_fastpp_default(0.10),
    )
    tpot_violation: float = knob(
        1.08,
        kind="float",
        low=0,
        low_open=True,
        modes=(FASTPP_GREEDY,),
        help="FastPP greedy: shrink when TPOT > this x the TPOT SLO.",
        search=Search(low=1.0, high=1.3),
        engines=_fastpp_default(1.08),
    )
    ttft_low: float = knob(
        0.1,
        kind="float",
        low=0,
        modes=(FASTPP_GREEDY,),
        help="FastPP greedy: shrink when TTFT < this x the TTFT SLO.",
        search=Search(low=0.02, high=0.3),
        engines=_fastpp_default(0.1),
    )
    ttft_high: float = knob(
        0.3,
        kind="float",
        low=0,
        modes=(FASTPP_GREEDY,),
        help="FastPP greedy: grow when TTFT > this x the TTFT SLO ...",
        search=Search(low=0.15, high=0.8),
        engines=_fastpp_default(0.3),
    )
    tpot_safe: float = knob(
        0.85,
        kind="float",
        low=0,
        low_open=True,
        modes=(FASTPP_GREEDY,),
        help="FastPP greedy: ... and TPOT < this x the TPOT SLO.",
        search=Search(low=0.6, high=1.0),
        engines=_fastpp_default(0.85),
    )
    alp_window_s: float = knob(
        10.0,
        kind="float",
        unit="s",
        low=0,
        low_open=True,
        modes=(FASTPP_ALP,),
        help="FastPP ALP: seconds of arrivals and backlog it plans for.",
        search=Search(low=2.0, high=30.0),
        engines=_fastpp_default(10.0),
    )
    slo_tpot_coeff: float = knob(
        1.05,
        kind="float",
        low=0,
        low_open=True,
        modes=(FASTPP_ALP,),
        help="FastPP ALP: TPOT budget as a multiple of the TPOT SLO.",
        search=Search(low=0.8, high=1.2),
        engines=_fastpp_default(1.05),
    )
    rls_forgetting: float = knob(
        0.9975,
        kind="float",
        low=0,
        high=1,
        low_open=True,
        modes=(FASTPP_ALP,),
        help="FastPP ALP: recursive least squares forgetting factor.",
        search=Search(low=0.99, high=0.9999),
        engines=_fastpp_default(0.9975),
    )
    controller_min_chunk: int = knob(
        128,
        kind="tokens",
        unit="tokens",
        low=1,
        modes=FASTPP_MODES,
        help="FastPP: smallest chunk the controller may choose.",
        search=Search(low=128, high=1024, step=128),
        engines=_fastpp_default(128),
    )
    controller_base_chunk: int = knob(
        128,
        kind="tokens",
        unit="tokens",
        low=1,
        modes=(FASTPP_GREEDY,),
        help="FastPP greedy: the chunk it starts from.",
    )
    controller_step: int = knob(
        128,
        kind="tokens",
        unit="tokens",
        low=1,
        modes=FASTPP_MODES,
        help="FastPP: chunk sizes move in steps of this many tokens.",
    )


@dataclass(frozen=True)
class AdaptiveSettings:
    """vpp-adaptive: chunks resized locally when stage times leave the linear law."""

    adaptive_threshold: float = knob(
        0.05,
        kind="float",
        low=0,
        low_open=True,
        modes=("vpp-adaptive",),
        help="vpp-adaptive: relative deviation from the linear law that triggers resizing.",
        search=Search(low=0.01, high=0.3, log=True),
    )
    adaptive_fit_chunks: int = knob(
        3,
        kind="int",
        low=2,
        modes=("vpp-adaptive",),
        help="vpp-adaptive: chunks the linear law is fitted on.",
        search=Search(low=2, high=6),
    )


@dataclass(frozen=True)
class DelaySettings:
    """Delay scheduling (decode micro-batch rebalancing), any mode."""

    delay_scheduling: bool = knob(
        False,
        kind="bool",
        help="Delay scheduling: rebalance decode micro-batches (on/off).",
        search=Search(choices=(False, True)),
        engines={"fastpp": EngineFlag(set_by="--enable-batch-rebalancing", default=False)},
    )
    waiting_tok_threshold: int = knob(
        1024,
        kind="int",
        unit="tokens",
        low=0,
        help="Delay scheduling: off while this many prompt tokens wait.",
        search=Search(low=0, high=8192, step=256, when="delay_scheduling"),
        engines=_fastpp_default(1024),
    )
    load_alpha: float = knob(
        0.4,
        kind="float",
        low=0,
        help="Delay scheduling: how far a micro-batch may exceed the mean.",
        search=Search(low=0.1, high=0.8, when="delay_scheduling"),
        engines=_fastpp_default(0.4),
    )
    base_unit: int = knob(
        128,
        kind="int",
        unit="requests",
        low=1,
        help="Delay scheduling: hardware-efficient micro-batch size unit.",
        search=Search(choices=(64, 128, 256), when="delay_scheduling"),
        engines=_fastpp_default(128),
    )
    delay_mode: str = knob(
        "auto",
        kind="choice",
        choices=("auto", "tpot_first", "e2e_first"),
        help="Delay scheduling: whom to delay.",
        search=Search(choices=("auto", "tpot_first", "e2e_first"), when="delay_scheduling"),
        engines=_fastpp_default("auto"),
    )


BUILT_IN_PARTS = (Scheduling, DcppSettings, FastPPSettings, AdaptiveSettings, DelaySettings)
for _part in BUILT_IN_PARTS:
    register_part(_part)
