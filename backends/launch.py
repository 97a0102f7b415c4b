"""The serving engines pipedeck launches and exports to, and which pipeline modes each can run.

The one mapping from a config to an engine's flags, environment and files,
used by `export` (and by whatever launches an engine). One registry: a
`ServingEngine` holds its launcher, its spelling of the common knobs and, in
`ServingEngine.modes`, what every mode it can run adds to the launch. A new
engine (an SGLang fork) is a `register_engine` call; a new mode on an engine
(FastPP's `fastpp-greedy`) is a `register_support` call. (Not the
simulator's `Engine`, which is its event loop.)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..scenarios.errors import PipedeckError
from .config import ResolvedConfig, default_layer_split

Value = int | float | str | None


class ExportError(PipedeckError):
    """A config cannot be exported as asked; the message is one line naming the field."""


@dataclass(frozen=True)
class Flag:
    """One command-line option; a value of None is a bare switch."""

    name: str
    value: Value = None

    def argv(self) -> tuple[str, ...]:
        """The option as command-line words."""
        return (self.name,) if self.value is None else (self.name, str(self.value))

    def yaml_item(self) -> tuple[str, object]:
        """This option as a key and value of the engine's `--config` YAML (`--no-X` is `X: false`)."""
        if self.value is not None:
            return self.name[2:], self.value
        if self.name.startswith("--no-"):
            return self.name[5:], False
        return self.name[2:], True


@dataclass(frozen=True)
class EnvVar:
    """One environment variable of the launch script.

    `set` exports the value, `default` exports it unless the operator already
    set one, `commented` writes a commented-out line for the operator to fill
    in (`value` is then a placeholder).
    """

    name: str
    value: str
    kind: Literal["set", "default", "commented"] = "set"
    note: str = ""


@dataclass(frozen=True)
class Launch:
    """What an engine needs to run one config: environment, options and caveats for the operator."""

    env: tuple[EnvVar, ...] = ()
    flags: tuple[Flag, ...] = ()
    notes: tuple[str, ...] = ()

    def __add__(self, other: Launch) -> Launch:
        return Launch(self.env + other.env, self.flags + other.flags, self.notes + other.notes)


Render = Callable[[ResolvedConfig], Launch]


@dataclass(frozen=True)
class ModeSupport:
    """How an engine runs one mode: what the mode adds to the launch and what it needs."""

    render: Render
    requires: str = ""  # what the engine build needs beyond a release, e.g. "VPP development branch"
    min_pp: int = 1


@dataclass(frozen=True)
class ServingEngine:
    """One serving engine: launcher, spelling of the common knobs, config file and runnable modes."""

    name: str
    program: tuple[str, ...]  # the launcher, e.g. ("vllm", "serve")
    model_flag: str | None  # None: the model is the first positional argument
    common: Render  # environment and options every mode gets
    config_file: str | None = None  # name of the engine's `--config` YAML; None if it reads none
    config_model_key: str = "model"
    modes: dict[str, ModeSupport] = field(default_factory=dict)
    delay_scheduling: ModeSupport | None = None  # how it runs decode rebalancing, if it can
    model_file: bool = False  # the weights must be a local file (llama-server's GGUF), not a hub id


ENGINES: dict[str, ServingEngine] = {}


def register_engine(engine: ServingEngine) -> ServingEngine:
    """Make an engine available to `pipedeck export`."""
    ENGINES[engine.name] = engine
    return engine


def register_support(engine: str, mode: str, support: ModeSupport) -> None:
    """Declare that `engine` can run `mode`, and how."""
    ENGINES[engine].modes[mode] = support


def get_engine(name: str) -> ServingEngine:
    """The registered engine called `name`; ExportError naming the allowed ones otherwise."""
    if name not in ENGINES:
        raise ExportError(f"format: unknown engine {name!r}; allowed: {', '.join(ENGINES)}")
    return ENGINES[name]


def engines_for(mode: str) -> list[str]:
    """The engines that can run `mode`, each with what it requires in parentheses."""
    return [f"{e.name} ({e.modes[mode].requires})" if e.modes[mode].requires else e.name
            for e in ENGINES.values() if mode in e.modes]


def plan_launch(config: ResolvedConfig, engine_name: str) -> tuple[ServingEngine, Launch]:
    """The engine and its launch for a resolved config; ExportError if the engine cannot run it."""
    engine = get_engine(engine_name)
    support = engine.modes.get(config.mode)
    if support is None:
        able = ", ".join(engines_for(config.mode)) or "none"
        raise ExportError(f"format: mode {config.mode} cannot run on {engine.name}; engines that can: {able}")
    if config.pp < support.min_pp:
        raise ExportError(f"pp: mode {config.mode} on {engine.name} needs pp >= {support.min_pp}, got {config.pp}")
    launch = engine.common(config) + support.render(config)
    if config.delay_scheduling:
        if engine.delay_scheduling is None:
            able = ", ".join(f"{e.name} ({e.delay_scheduling.requires})" for e in ENGINES.values()
                             if e.delay_scheduling) or "none"
            raise ExportError(f"format: delay scheduling cannot run on {engine.name}; engines that can: {able}")
        launch += engine.delay_scheduling.render(config)
    return engine, launch


# -- what the engines share ---------------------------------------------------------

def compact_json(value: object) -> str:
    """JSON without spaces, as engines take it in one argument."""
    return json.dumps(value, separators=(",", ":"))


def partition_env(env_name: str, config: ResolvedConfig,
                  implicit: Callable[[int, int], tuple[int, ...] | None]) -> tuple[EnvVar, ...]:
    """The per-PP-rank layer partition env var for a linear layout, unless `implicit(layers, pp)` is that split."""
    if config.mode_spec.layout != "linear":
        return ()
    per_rank = tuple(config.layers_per_rank())
    if per_rank == implicit(config.model_profile.num_layers, config.pp):
        return ()
    return (EnvVar(env_name, ",".join(map(str, per_rank))),)


def exact_split(layers: int, pp: int) -> tuple[int, ...] | None:
    """The split every engine version defaults to when the layers divide evenly; None when they do not."""
    return (layers // pp,) * pp if layers % pp == 0 else None


def vpp_layer_ranges(config: ResolvedConfig) -> list[list[list[int]]]:
    """Half-open [start, end) layer ranges, one list per PP rank holding its virtual stages in execution order."""
    ranges: list[list[list[int]]] = [[] for _ in range(config.pp)]
    start = 0
    for rank, count in zip(config.stage_ranks, config.layer_split or ()):
        ranges[rank].append([start, start + count])
        start += count
    return ranges


def _nothing(config: ResolvedConfig) -> Launch:
    return Launch()


def unmatched_semantics(config: ResolvedConfig, engine: str, matches: bool, rule: str) -> tuple[str, ...]:
    """A note when the simulated scheduler semantics (decode_in_budget, mixed_batches, sticky_decodes) are not the engine's."""
    if matches:
        return ()
    on_off = {True: "on", False: "off"}
    return (f"{engine} {rule}; this config was simulated with decode_in_budget={on_off[config.decode_in_budget]}, "
            f"mixed_batches={on_off[config.mixed_batches]} and sticky_decodes={on_off[config.sticky_decodes]}, "
            f"which {engine} cannot match.",)


# -- vLLM and vLLM-Ascend -----------------------------------------------------------

def _vllm_common(config: ResolvedConfig) -> Launch:
    return Launch(
        notes=unmatched_semantics(config, "vLLM",
                                  config.decode_in_budget and config.mixed_batches and not config.sticky_decodes,
                                  "always mixes decodes into prefill steps, counts them against "
                                  "--max-num-batched-tokens and lets any running request join any step"),
        env=partition_env("VLLM_PP_LAYER_PARTITION", config, default_layer_split),
        flags=(
            Flag("--tensor-parallel-size", config.tp),
            Flag("--pipeline-parallel-size", config.pp),
            Flag("--max-num-batched-tokens", config.chunk),
            Flag("--enable-chunked-prefill"),
            Flag("--max-num-seqs", config.max_running),
        ),
    )


def _ascend_env(config: ResolvedConfig) -> Launch:
    devices = ",".join(str(d) for d in range(config.devices))
    return Launch(env=(
        EnvVar("HCCL_OP_EXPANSION_MODE", "AIV", "default"),
        EnvVar("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True", "default"),
        EnvVar("TASK_QUEUE_ENABLE", "1", "default"),
        EnvVar("ASCEND_RT_VISIBLE_DEVICES", devices, "commented", f"the {config.devices} NPUs this node serves with"),
        EnvVar("HCCL_IF_IP", "<this node's IP>", "commented", "multi-node: the address HCCL binds"),
        EnvVar("HCCL_SOCKET_IFNAME", "<NIC>", "commented", "multi-node: the interface HCCL uses"),
        EnvVar("GLOO_SOCKET_IFNAME", "<NIC>", "commented", "multi-node: the interface Gloo uses"),
        EnvVar("HCCL_BUFFSIZE", "<MB>", "commented", "HCCL buffer size"),
        EnvVar("HCCL_CONNECT_TIMEOUT", "<seconds>", "commented", "HCCL link set-up timeout"),
        EnvVar("HCCL_EXEC_TIMEOUT", "<seconds>", "commented", "HCCL collective timeout"),
    ))


def _ascend_common(config: ResolvedConfig) -> Launch:
    return _ascend_env(config) + _vllm_common(config)


def _ascend_dcpp(config: ResolvedConfig) -> Launch:
    min_chunk = min(config.min_chunk, config.chunk)  # the simulator clamps min_chunk to the chunk budget
    profiling = {"enabled": True, "smooth_factor": config.smooth_factor, "min_chunk": min_chunk}
    notes = () if min_chunk == config.min_chunk else (
        f"min_chunk {config.min_chunk} exceeds the chunk budget; exported as {min_chunk}, as simulated.",)
    return Launch(
        flags=(Flag("--additional-config", compact_json({"scheduler_config": {"profiling_chunk_config": profiling}})),
               Flag("--no-async-scheduling")),
        notes=notes,
    )


def _ascend_vpp(config: ResolvedConfig) -> Launch:
    settings = {"virtual_pipeline_parallel_size": config.virtual_stages, "vpp_layer_ranges": vpp_layer_ranges(config)}
    return Launch(
        env=(EnvVar("ENABLE_VPP", "true"),),
        flags=(Flag("--additional-config", compact_json(settings)),),
        notes=(
            "WARNING: this launch needs vLLM-Ascend's VPP development branch (an open pull request,",
            "not in any release). A released vLLM-Ascend does not implement ENABLE_VPP,",
            "virtual_pipeline_parallel_size or vpp_layer_ranges.",
            f"VPP variant chosen: {config.mode} (of vpp-sync, vpp-async, vpp): {config.mode_spec.summary}.",
            "pipedeck knows no launch option that selects the variant; check that the branch runs this one.",
            "vpp_layer_ranges: per PP rank, its virtual stages' [start, end) layer ranges in execution order.",
        ),
    )


# -- SGLang -------------------------------------------------------------------------

def _sglang_common(config: ResolvedConfig) -> Launch:
    # SGLang's default split gives the remainder to the last ranks (61 layers on 2: 30,31), not vLLM's
    # 31,30, so any split with a remainder is written out.
    notes = unmatched_semantics(config, "SGLang", config.decode_in_budget == config.mixed_batches and config.sticky_decodes,
                                "counts running decodes against --chunked-prefill-size only with --enable-mixed-chunk "
                                "and keeps each request in its micro-batch's running batch")
    return Launch(
        env=partition_env("SGLANG_PP_LAYER_PARTITION", config, exact_split),
        flags=(
            Flag("--tp-size", config.tp),
            Flag("--pp-size", config.pp),
            Flag("--chunked-prefill-size", config.chunk),
            Flag("--max-running-requests", config.max_running),
            *((Flag("--enable-mixed-chunk"),) if config.mixed_batches else ()),
            Flag("--enable-metrics"),
        ),
        notes=notes,
    )


def _sglang_dcpp(config: ResolvedConfig) -> Launch:
    return Launch(
        env=(EnvVar("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR", str(config.smooth_factor)),),
        flags=(Flag("--enable-dynamic-chunking"),),
        notes=(f"SGLang's dynamic chunking has no minimum-chunk option; min_chunk {config.min_chunk} is not applied.",),
    )


# -- llama.cpp's llama-server ----------------------------------------------------------

def _llama_common(config: ResolvedConfig) -> Launch:
    if config.tp != 1 or config.pp != 1:
        raise ExportError(f"tp: llama-server runs one process without tensor or pipeline parallelism; "
                          f"got tp={config.tp} pp={config.pp} (use tp=1 pp=1)")
    return Launch(flags=(
        Flag("--parallel", config.max_running),  # slots: the requests it decodes at once
        Flag("--ctx-size", config.kv_capacity),  # KV cache tokens over all slots
        Flag("--batch-size", config.chunk),  # tokens one decode call takes: the step's budget
        Flag("--ubatch-size", config.chunk),
        Flag("--metrics"),
    ))


register_engine(ServingEngine("vllm-ascend", ("vllm", "serve"), None, _ascend_common, "vllm-config.yaml"))
register_engine(ServingEngine("vllm", ("vllm", "serve"), None, _vllm_common, "vllm-config.yaml"))
register_engine(ServingEngine("sglang", ("python", "-m", "sglang.launch_server"), "--model-path", _sglang_common,
                       "sglang-config.yaml", "model-path"))
register_engine(ServingEngine("llama-server", ("llama-server",), "--model", _llama_common, model_file=True))
for _name in ENGINES:
    register_support(_name, "cpp", ModeSupport(_nothing))
register_support("vllm-ascend", "dcpp", ModeSupport(_ascend_dcpp, min_pp=2))
register_support("sglang", "dcpp", ModeSupport(_sglang_dcpp, min_pp=2))
for _mode in ("vpp-sync", "vpp-async", "vpp"):
    register_support("vllm-ascend", _mode, ModeSupport(_ascend_vpp, requires="VPP development branch"))


# -- FastPP (an SGLang 0.4.1 fork) ------------------------------------------------------

FASTPP = "FastPP fork of SGLang 0.4.1"
_FASTPP_DEFAULTS = {"kv_free_threshold": 0.10, "tpot_violation": 1.08, "ttft_low": 0.1, "ttft_high": 0.3,
                    "tpot_safe": 0.85, "alp_window_s": 10.0, "slo_tpot_coeff": 1.05, "rls_forgetting": 0.9975,
                    "controller_min_chunk": 128, "waiting_tok_threshold": 1024, "load_alpha": 0.4,
                    "base_unit": 128, "delay_mode": "auto"}


def _fastpp_tuned(config: ResolvedConfig, fields: tuple[str, ...]) -> tuple[str, ...]:
    """Notes for tuned values that differ from FastPP's defaults (it takes them from its own config)."""
    changed = [f"{f}={getattr(config, f)!r}" for f in fields if getattr(config, f) != _FASTPP_DEFAULTS[f]]
    return (f"Tuned FastPP settings that differ from its defaults (set them in the fork's config): "
            f"{', '.join(changed)}",) if changed else ()


def _fastpp(strategy: str) -> Render:
    def render(config: ResolvedConfig) -> Launch:
        fields = config.mode_spec.params
        return Launch(
            flags=(Flag("--enable-dynamic-chunk"), Flag("--dynamic-chunk-strategy", strategy),
                   Flag("--disable-radix-cache"), Flag("--disable-overlap-schedule")),
            notes=(f"This launch needs the {FASTPP}: --enable-dynamic-chunk and --dynamic-chunk-strategy are its flags.",
                   f"The controller steers by TTFT {config.slo_ttft_s:g} s and TPOT {config.slo_tpot_s:g} s.")
            + _fastpp_tuned(config, tuple(f for f in fields if f in _FASTPP_DEFAULTS)),
        )
    return render


def _fastpp_rebalancing(config: ResolvedConfig) -> Launch:
    return Launch(flags=(Flag("--enable-batch-rebalancing"),),
                  notes=(f"Delay scheduling is the {FASTPP}'s --enable-batch-rebalancing.",)
                  + _fastpp_tuned(config, ("waiting_tok_threshold", "load_alpha", "base_unit", "delay_mode")))


register_support("sglang", "fastpp-greedy", ModeSupport(_fastpp("greedy"), requires=FASTPP))
register_support("sglang", "fastpp-alp", ModeSupport(_fastpp("alp"), requires=FASTPP))
ENGINES["sglang"] = dataclasses.replace(ENGINES["sglang"], delay_scheduling=ModeSupport(_fastpp_rebalancing,
                                                                                         requires=FASTPP))
