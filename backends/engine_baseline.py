"""What each serving engine runs when the operator sets nothing: the tuner's baseline trial.

An engine picks its step token budget and its running-request cap from the
device it finds, so the baseline depends on the engine, its version and the
hardware. Each rule below is the engine's own, with where it is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .errors import ConfigError
from .knobs import knob_fields
from .parts import Scheduling
from .profiles.schema import HardwareProfile


@dataclass(frozen=True)
class EngineDefaults:
    """An engine's default step budget (`--max-num-batched-tokens` and its kin) and running-request cap."""

    engine: str  # the engine and version the rule was read from
    chunk: int
    max_running: int
    source: str


def _declared(name: str, engine: str) -> int:
    """The engine's own default of a `Scheduling` knob where no rule of the device's changes it, as the knob
    declares it (backends/parts.py)."""
    declaration = next(f.metadata["knob"] for f in knob_fields(Scheduling) if f.name == name)
    value = declaration.engines[engine].default
    if not isinstance(value, int):
        raise TypeError(f"{name}: {engine}'s declared default is not a whole number: {value!r}")
    return value


def _memory_gib(hardware: HardwareProfile) -> float:
    """Device memory as the engine reads it. HBM sizes on spec sheets are binary: an A100 40GB reports 40 GiB."""
    return hardware.memory_gb


def _vllm(hardware: HardwareProfile) -> EngineDefaults:
    # EngineArgs._set_default_args (vllm/engine/arg_utils.py), usage context OPENAI_API_SERVER:
    # devices of at least 70 GiB that are not A100s get the larger budget.
    large = _memory_gib(hardware) >= 70 and "a100" not in hardware.name.lower()
    return EngineDefaults(
        "vLLM 0.33 (`vllm serve`)",
        8192 if large else 2048,
        1024 if large else 256,
        "vllm/engine/arg_utils.py EngineArgs._set_default_args, OPENAI_API_SERVER: 8192 tokens / 1024 sequences "
        "on devices of >= 70 GiB other than A100, else 2048 / 256",
    )


def _vllm_ascend(hardware: HardwareProfile) -> EngineDefaults:
    base = _vllm(hardware)
    return EngineDefaults(
        "vLLM-Ascend 0.23 on vLLM 0.23 (the rule of 0.33 too)",
        base.chunk,
        base.max_running,
        "vLLM-Ascend does not override vLLM's defaults (live.md): " + base.source,
    )


def _sglang(hardware: HardwareProfile) -> EngineDefaults:
    # ServerArgs._handle_gpu_memory_settings (sglang/srt/server_args.py): chunked_prefill_size by device memory.
    gib, npu = _memory_gib(hardware), hardware.name.lower().startswith("ascend")
    tiers = (
        (20, False, 2048),
        (32, True, 32768),
        (35, False, 2048),
        (60, False, 4096),
        (64, True, 32768),
        (90, False, 8192),
        (160, False, 8192),
    )
    chunk = next((size for below, npu_only, size in tiers if gib < below and (npu or not npu_only)), 16384)
    return EngineDefaults(
        "SGLang 0.5",
        chunk,
        _declared("max_running", "sglang"),
        "sglang/srt/server_args.py ServerArgs._handle_gpu_memory_settings: chunked_prefill_size 2048 below "
        "20 GiB, 32768 on NPUs below 32 GiB, 2048 below 35 GiB, 4096 below 60 GiB, 32768 on NPUs below 64 GiB, "
        "8192 below 160 GiB, else 16384; running requests capped by the request pool, at most 4096 "
        "(model_runner: max_num_reqs = min(max(tokens / context * 512, 2048), 4096))",
    )


def _fastpp(hardware: HardwareProfile) -> EngineDefaults:
    # The fork's base, SGLang 0.4.1: ServerArgs.__post_init__ (sglang/srt/server_args.py) sets chunked_prefill_size
    # 2048 below 25,000 MiB of GPU memory, else 8192; ModelRunner.init_memory_pool (model_executor/model_runner.py)
    # sizes the request pool min(max(tokens / context * 512, 2048), 4096).
    chunk = 2048 if _memory_gib(hardware) * 1024 < 25_000 else 8192
    return EngineDefaults(
        "FastPP fork of SGLang 0.4.1",
        chunk,
        _declared("max_running", "fastpp"),
        "sglang 0.4.1 sglang/srt/server_args.py ServerArgs.__post_init__: chunked_prefill_size 2048 below "
        "25,000 MiB of GPU memory, else 8192; running requests capped by the request pool, at most 4096 "
        "(model_runner: max_num_reqs = min(max(tokens / context * 512, 2048), 4096))",
    )


def _llama_server(hardware: HardwareProfile) -> EngineDefaults:
    return EngineDefaults(
        "llama.cpp llama-server",
        _declared("chunk", "llama-server"),
        _declared("max_running", "llama-server"),
        "llama.cpp common/common.h common_params: n_batch 2048; tools/server: n_parallel -1 (auto) gives 4 slots",
    )


DEFAULTS: dict[str, Callable[[HardwareProfile], EngineDefaults]] = {
    "vllm": _vllm,
    "vllm-ascend": _vllm_ascend,
    "sglang": _sglang,
    "fastpp": _fastpp,
    "llama-server": _llama_server,
}


def engine_defaults(engine: str, hardware: HardwareProfile) -> EngineDefaults:
    """`engine`'s defaults on `hardware`; a one-line ConfigError naming the engines that have a rule otherwise."""
    try:
        return DEFAULTS[engine](hardware)
    except KeyError:
        raise ConfigError(f"engine: no defaults known for {engine!r}; allowed: {', '.join(DEFAULTS)}") from None
