"""The search space: registered dimensions sampled define-by-run.

Each `Dimension` sets one or more ServingConfig fields. It is sampled only
when active (conditional on what was already decided, e.g. DCPP's knobs only
for mode dcpp), can be pinned with `--fix flag=value` using the same flag
names as `pipedeck simulate`, and knows the engine default. New knobs join
the search by `register_dimension`, never by editing the objective.

Optuna's parameters carry the `--fix` names too: `tp` (pp is what is left
of the devices), `mode`, `chunk`, `max-running`, `smooth-factor`, ... and
one `layer-split[i] of n` per stage but the last (the layers of stage i of
an n-stage split; the last stage takes the rest). `searched_flags` gives a
trial's choices as `--fix` names and values, as the run store keeps them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

import optuna

from ..backends import (
    MODES,
    PARTS,
    ConfigError,
    EngineDefaults,
    HardwareProfile,
    Knob,
    ServingConfig,
    backend_entry,
    declared_knobs,
    default_layer_split,
    engine_defaults,
    engines_for,
    get_engine,
    knob_default,
    parse_layer_split,
    parse_tokens,
    setting_text,
)

Draft = dict[str, object]  # ServingConfig fields decided so far
MAX_RUNNING_RANGE = (8, 1024)  # vLLM's defaults are 256 and 1024; a few slots suit long prompts


def _align_up(tokens: int, tile: int) -> int:
    return -(-tokens // tile) * tile


@dataclass(frozen=True)
class SpaceContext:
    """The cluster being tuned, the engine whose defaults are the baseline, the workload's longest prompt and the
    backend trials run on."""

    model: str
    hardware: str
    devices: int
    engine: str = "vllm"  # the baseline trial is this engine's default config on this hardware
    longest_prompt: int = 0  # the chunk range reaches past it, so a whole prompt fits one step
    modes: tuple[str, ...] | None = None  # the modes to search (None: every registered mode)
    backend: str = "sim"  # a knob it does not read is never searched: every trial would run the same

    def searches(self, dim: Dimension) -> bool:
        """Whether `dim` is searched for this backend: a structural dimension always, a knob where it is read."""
        return dim.knob is None or backend_entry(self.backend).capabilities.reads(dim.knob)

    @cached_property
    def hardware_profile(self) -> HardwareProfile:
        return ServingConfig.of(model=self.model, hardware=self.hardware).hardware_profile

    @cached_property
    def baseline(self) -> EngineDefaults:
        """The engine's own step budget and running-request cap on this hardware."""
        return engine_defaults(self.engine, self.hardware_profile)

    @cached_property
    def tile(self) -> int:
        """Chunks are multiples of the GEMM tile: a partial tile costs a whole one."""
        return self.hardware_profile.gemm_tile_tokens

    @cached_property
    def chunk_range(self) -> tuple[int, int]:
        """Tile-aligned bounds of the chunk, searched on a log scale.

        Low: where a step's GEMMs reach 80% of their large-batch efficiency
        (four times `matmul_half_tokens`); smaller chunks only add per-step
        overhead. High: twice the longest prompt (a whole prompt in one step,
        with room to pack another), at least 32 times the low end and the
        engine's default.
        """
        hw = self.hardware_profile
        low = _align_up(max(hw.gemm_tile_tokens, round(4 * hw.matmul_half_tokens)), self.tile)
        high = _align_up(max(2 * self.longest_prompt, 32 * low, self.baseline.chunk), self.tile)
        return low, high

    @cached_property
    def max_running_range(self) -> tuple[int, int]:
        """Bounds of the running-request cap (log scale), wide enough to hold the engine's default."""
        return min(MAX_RUNNING_RANGE[0], self.baseline.max_running), max(
            MAX_RUNNING_RANGE[1], self.baseline.max_running
        )

    @cached_property
    def layers(self) -> int:
        return ServingConfig.of(model=self.model, hardware=self.hardware).model_profile.num_layers

    @cached_property
    def tp_options(self) -> tuple[int, ...]:
        """The tp of every feasible tp x pp split of the devices (weights fit, heads divide), widest first."""
        options = []
        for pp in range(1, self.devices + 1):
            if self.devices % pp:
                continue
            try:
                ServingConfig.of(model=self.model, hardware=self.hardware, tp=self.devices // pp, pp=pp).resolve()
            except ConfigError:
                continue
            options.append(self.devices // pp)
        if not options:
            raise ConfigError(
                f"devices: no tp x pp split of {self.devices} devices can hold {self.model} on {self.hardware}"
            )
        return tuple(options)


@dataclass(frozen=True)
class Dimension:
    """One searchable knob."""

    flag: str  # as on the command line and in --fix
    fields: tuple[str, ...]  # ServingConfig fields it decides
    parse: Callable[[str], object]  # a --fix value -> the value of each field it names
    suggest: Callable[[optuna.trial.BaseTrial, Draft, SpaceContext], Draft]
    default: Callable[[Draft, SpaceContext], dict[str, object]]  # engine default, as trial params
    active: Callable[[Draft], bool] = lambda draft: True
    searched: bool = True  # False: only ever pinned with --fix, so never a knob the search could move
    knob: Knob | None = None  # the declared knob it samples (None: a structural dimension)

    @property
    def param(self) -> str:
        """The Optuna parameter (or, for the layer split, the prefix of those) it is sampled as: a --fix name."""
        return self.fields[0].replace("_", "-")


DIMENSIONS: list[Dimension] = []  # the structural dimensions, whose sampling needs code; knobs come after


def register_dimension(dim: Dimension) -> Dimension:
    """Add a structural dimension to the search space (after those it depends on); a knob needs none."""
    DIMENSIONS.append(dim)
    return dim


def dimension_for(flag: str) -> Dimension:
    """The dimension that decides the field a --fix flag names (tp and pp: the parallelism)."""
    name = flag.strip().replace("_", "-")
    for dim in dimensions():
        if name in (f.replace("_", "-") for f in dim.fields):
            return dim
    flags = sorted(f.replace("_", "-") for d in dimensions() for f in d.fields)
    raise ConfigError(f"fix: unknown dimension {flag!r}; allowed: {', '.join(flags)}")


SHAPE_DIMENSIONS = ("parallelism", "mode", "chunk", "max-running", "layer-split")  # shown on their own by the summaries


def knob_settings(config: Draft) -> list[str]:
    """`flag=value` for each searched knob beyond the shape that is active for this config, in search order."""
    settings = []
    for dim in dimensions():
        if dim.flag in SHAPE_DIMENSIONS or not dim.active(config):
            continue
        settings.append(f"{dim.flag}={setting_text(config.get(dim.fields[0]))}")
    return settings


def parse_fixes(items: tuple[str, ...] | list[str]) -> dict[str, object]:
    """`--fix key=value` pairs -> ServingConfig field values."""
    fixed: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not value.strip():
            raise ConfigError(f"fix: expected key=value such as mode=vpp or chunk=24k, got {item!r}")
        dim = dimension_for(key)
        fixed[key.strip().replace("-", "_")] = dim.parse(value.strip())
    return fixed


def engine_search(
    engine: str, modes: tuple[str, ...] | None, fixed: dict[str, object]
) -> tuple[tuple[str, ...], dict[str, object]]:
    """The modes to search and the pins that keep every trial launchable on `engine`.

    From the table `export` launches by (backends/launch.py): only the modes
    the engine can run, and delay scheduling pinned off on an engine without
    it. A pin of something the engine cannot run is refused in one line.
    """
    target = get_engine(engine)
    pinned = fixed.get("mode")
    if pinned is not None and pinned not in target.modes:
        raise ConfigError(
            f"fix: mode {pinned} cannot run on {engine}, the engine tuned for (--format); "
            f"engines that can: {', '.join(engines_for(str(pinned))) or 'none'}"
        )
    searched = tuple(m for m in (modes or MODES) if m in target.modes)
    if target.delay_scheduling is not None:
        return searched, fixed
    if fixed.get("delay_scheduling"):
        raise ConfigError(f"fix: delay scheduling cannot run on {engine}, the engine tuned for (--format)")
    return searched, {**fixed, "delay_scheduling": fixed.get("delay_scheduling", False)}


def suggest_config(trial: optuna.trial.BaseTrial, ctx: SpaceContext, fixed: dict[str, object]) -> Draft:
    """Sample (or take pinned) values for every active dimension, in registration order.

    A pin of None (`--fix layer-split=default`) leaves the field to ServingConfig's default.
    """
    draft: Draft = {"model": ctx.model, "hardware": ctx.hardware, **fixed}
    for dim in dimensions():
        if dim.active(draft) and ctx.searches(dim) and not all(f in draft for f in dim.fields):
            draft.update(dim.suggest(trial, draft, ctx))
    return draft


def dimension_of_param(name: str) -> Dimension | None:
    """The dimension that samples Optuna parameter `name`; None for a name this space never makes."""
    if "[" in name and not _SPLIT_PARAM.fullmatch(name):
        return None
    return next((dim for dim in dimensions() if dim.searched and dim.param == name.split("[", 1)[0]), None)


def foreign_params(names: Iterable[str]) -> list[str]:
    """Parameter names this space never makes, such as an older pipedeck's `parallelism` or `split4_0`."""
    return sorted({name for name in names if dimension_of_param(name) is None})


def searched_flags(params: Iterable[str], config: Draft) -> dict[str, object]:
    """What a trial's search chose, as `--fix` names and values: each field of every dimension that sampled
    one of `params`, as `config` has it (tp and pp; the layer split as "15,16,15,15"; the chunk on its tile)."""
    sampled = {id(dim) for dim in map(dimension_of_param, params) if dim is not None}
    return {
        field.replace("_", "-"): _flag_value(config[field])
        for dim in dimensions()
        if id(dim) in sampled
        for field in dim.fields
        if field in config
    }


def _flag_value(value: object) -> object:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else value


def default_params(ctx: SpaceContext, fixed: dict[str, object]) -> dict[str, object]:
    """Trial parameters of the engine's default config (for enqueue_trial), respecting pins."""
    params: dict[str, object] = {}
    draft: Draft = {"model": ctx.model, "hardware": ctx.hardware, **fixed}
    trial = optuna.trial.FixedTrial(params)
    for dim in dimensions():
        if dim.active(draft) and ctx.searches(dim) and not all(f in draft for f in dim.fields):
            params.update(dim.default(draft, ctx))
            draft.update(dim.suggest(trial, draft, ctx))
    return params


# -- the built-in dimensions -------------------------------------------------------


def _int_field(name: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{name}: must be positive integers, got {text!r}") from None

    return parse


def _count(value: object) -> int:
    """A whole number the draft holds (tp, pp, chunk), as pinned or sampled."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise ConfigError(f"fix: expected a whole number, got {value!r}")


def _suggest_parallelism(trial: optuna.trial.BaseTrial, draft: Draft, ctx: SpaceContext) -> Draft:
    if "tp" in draft:
        return {"pp": _split_devices(ctx, given=_count(draft["tp"]), name="tp")}
    if "pp" in draft:
        return {"tp": _split_devices(ctx, given=_count(draft["pp"]), name="pp")}
    tp = int(trial.suggest_categorical("tp", ctx.tp_options))
    return {"tp": tp, "pp": ctx.devices // tp}


def _split_devices(ctx: SpaceContext, *, given: int, name: str) -> int:
    """What is left of the devices once `name` (tp or pp) takes `given` of them."""
    if given < 1 or ctx.devices % given:
        raise ConfigError(f"{name}: must divide the {ctx.devices} devices, got {given}")
    return ctx.devices // given


def _default_parallelism(draft: Draft, ctx: SpaceContext) -> dict[str, object]:
    """One node's worth of TP (8 devices, or fewer), the rest as PP, as operators deploy by default."""
    if "tp" in draft or "pp" in draft:
        return {}
    return {"tp": min(ctx.tp_options, key=lambda tp: (tp > 8, -tp))}


def _parse_mode(text: str) -> str:
    if text not in MODES:
        raise ConfigError(f"mode: unknown mode {text!r}; allowed: {', '.join(MODES)}")
    return text


def _suggest_mode(trial: optuna.trial.BaseTrial, draft: Draft, ctx: SpaceContext) -> Draft:
    if _count(draft["pp"]) == 1:  # the TP baseline has no pipeline to schedule
        return {"mode": "cpp"}
    return {"mode": trial.suggest_categorical("mode", ctx.modes or tuple(MODES))}


def _suggest_chunk(trial: optuna.trial.BaseTrial, draft: Draft, ctx: SpaceContext) -> Draft:
    """A log-scaled chunk snapped to the tile (uneven sizes such as 24K are tile multiples too)."""
    low, high = ctx.chunk_range
    return {"chunk": max(low, round(trial.suggest_int("chunk", low, high, log=True) / ctx.tile) * ctx.tile)}


def _suggest_max_running(trial: optuna.trial.BaseTrial, draft: Draft, ctx: SpaceContext) -> Draft:
    """The running-request cap, at most the chunk: vLLM refuses --max-num-seqs above --max-num-batched-tokens."""
    return {
        "max_running": min(trial.suggest_int("max-running", *ctx.max_running_range, log=True), _count(draft["chunk"]))
    }


def _split_shape(draft: Draft, ctx: SpaceContext) -> tuple[tuple[int, ...], int]:
    """vLLM's split for this pipeline and how far each stage may move from it."""
    stages = _count(draft["pp"]) * MODES[str(draft["mode"])].virtual_stages
    base = default_layer_split(ctx.layers, stages)
    if stages == 1:
        return base, 0
    reach = max(1, round(0.1 * ctx.layers / stages))
    return base, min(reach, (min(base) - 1) // (stages - 1))


_SPLIT_PARAM = re.compile(r"layer-split\[\d+\] of \d+")


def _split_param(stage: int, stages: int) -> str:
    """One stage's layers as an Optuna parameter; the stage count in the name keeps each pipeline depth's own."""
    return f"layer-split[{stage}] of {stages}"


def _suggest_split(trial: optuna.trial.BaseTrial, draft: Draft, ctx: SpaceContext) -> Draft:
    """Each stage but the last within `reach` layers of vLLM's split; the last stage takes the rest."""
    base, reach = _split_shape(draft, ctx)
    if reach == 0:
        return {"layer_split": base}
    split = [trial.suggest_int(_split_param(i, len(base)), b - reach, b + reach) for i, b in enumerate(base[:-1])]
    return {"layer_split": (*split, ctx.layers - sum(split))}


def _default_split(draft: Draft, ctx: SpaceContext) -> dict[str, object]:
    base, reach = _split_shape(draft, ctx)
    return {_split_param(i, len(base)): b for i, b in enumerate(base[:-1])} if reach else {}


def knob_dimension(knob: Knob) -> Dimension:
    """The dimension of a declared knob with a `search`: sampled under its --fix name as the declaration says,
    in the modes it applies to and while the switch it depends on is on, defaulting to its declared default."""
    search = knob.search
    if search is None:
        raise ValueError(f"{knob.field}: declares no search")
    flag = knob.field.replace("_", "-")
    default = knob_default(knob.field)

    def sample(trial: optuna.trial.BaseTrial) -> object:
        if search.choices:
            return trial.suggest_categorical(flag, search.choices)  # type: ignore[arg-type]
        if knob.kind in ("int", "tokens"):
            return trial.suggest_int(flag, int(search.low), int(search.high), step=search.step or 1, log=search.log)
        return trial.suggest_float(flag, search.low, search.high, log=search.log)

    def active(draft: Draft) -> bool:
        in_mode = not knob.modes or draft.get("mode") in knob.modes
        return in_mode and (not search.when or bool(draft.get(search.when)))

    return Dimension(
        flag,
        (knob.field,),
        knob.check,
        lambda trial, draft, ctx: {knob.field: sample(trial)},
        lambda draft, ctx: {flag: default},
        active=active,
        knob=knob,
    )


register_dimension(
    Dimension("parallelism", ("tp", "pp"), _int_field("tp and pp"), _suggest_parallelism, _default_parallelism)
)
register_dimension(
    Dimension(
        "mode",
        ("mode",),
        _parse_mode,
        _suggest_mode,
        lambda draft, ctx: {"mode": "cpp"} if _count(draft["pp"]) > 1 else {},
    )
)
register_dimension(
    Dimension(
        "chunk",
        ("chunk",),
        lambda text: parse_tokens(text, "chunk"),
        _suggest_chunk,
        lambda draft, ctx: {"chunk": ctx.baseline.chunk},
    )
)
register_dimension(
    Dimension(
        "max-running",
        ("max_running",),
        _int_field("max_running"),
        _suggest_max_running,
        lambda draft, ctx: {"max-running": ctx.baseline.max_running},
    )
)
register_dimension(Dimension("layer-split", ("layer_split",), parse_layer_split, _suggest_split, _default_split))

# pinned only, never searched (`--fix kv-capacity=8192`): what a live engine must be told it can hold, e.g.
# llama-server, which splits its KV cache (--ctx-size) over its slots (--parallel)
KV_CAPACITY = Dimension(
    "kv-capacity",
    ("kv_capacity",),
    lambda text: parse_tokens(text, "kv_capacity"),
    lambda trial, draft, ctx: {},
    lambda draft, ctx: {},
    active=lambda draft: False,
    searched=False,
)


def dimensions() -> list[Dimension]:
    """The search space in sampling order: the registered structural dimensions, then every declared knob with a
    `search` in declaration order (backends/parts.py and any part registered since), then the pinned-only ones."""
    return [*DIMENSIONS, *_knob_dimensions(tuple(PARTS)), KV_CAPACITY]


@functools.cache
def _knob_dimensions(parts: tuple[type, ...]) -> tuple[Dimension, ...]:
    """The dimensions of the knobs `parts` declare with a search (`parts`: the registered ones, as the key)."""
    return tuple(knob_dimension(knob) for knob in declared_knobs() if knob.search is not None)
