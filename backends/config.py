"""`ServingConfig`, one serving deployment as asked, composed of its parts, and `ResolvedConfig`, the same validated.

A config names what is served (`model`, `hardware`, `mode`) and holds one
frozen part per concern (backends/parts.py): `parallelism`, `scheduling`,
`memory` and each scheme's own settings (`dcpp`, `fastpp`, `adaptive`,
`delay`); parts registered beyond these (`register_part`) are held in
`extra_parts`. Components take the part they read: `config.scheduling.chunk`.

`RawConfig` holds what the command line or the Config form gave (text such
as "8k"); its `parse()` gives a `ServingConfig` whose fields hold their own
types. `ServingConfig.resolve()` validates every field before any work and returns a
`ResolvedConfig`, a type of its own whose derived fields are filled in
(`ResolvedParallelism`: layer split and virtual stages; `ResolvedMemory`: KV
capacity), with the model and hardware profiles it was resolved against. The
backends run resolved configs only.

At the edges a config is flat, one value per name (the CLI, `--fix`, the
Config form, the store's JSON): `ServingConfig.of(tp=8, chunk=16384)`,
`values()`, `replace(**changes)`, `to_dict()` and `from_dict()`. Each flat
name is a field of exactly one part; the parts' dataclass fields say which.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Protocol, TypeVar

from .errors import ConfigError
from .knobs import PARTS, declared_knobs, knob_named
from .memory import kv_capacity_tokens, weight_bytes_per_device
from .parts import (
    AdaptiveSettings,
    DcppSettings,
    DelaySettings,
    FastPPSettings,
    Memory,
    Parallelism,
    ResolvedMemory,
    ResolvedParallelism,
    Scheduling,
)
from .policies.layouts import LAYOUTS
from .policies.modes import MODES, ModeSpec
from .profiles import ProfileError, load_hardware, load_model
from .profiles.schema import HardwareProfile, ModelProfile
from .tokens import parse_tokens

# Scheduler semantics of an SGLang launch with --enable-mixed-chunk, as FastPP runs: running decodes count
# against the chunk budget, admission keeps the settled new-token ratio (0.7 x 0.14) of the running outputs
# free, the request pool is sized from memory (4096 on the cards here) rather than vLLM's 256, and each
# micro-batch slot keeps its own running batch (running_mbs in SGLang's PP scheduler).
SGLANG_MIXED_CHUNK = {
    "decode_in_budget": True,
    "mixed_batches": True,
    "output_reserve": 0.098,
    "max_running": 4096,
    "sticky_decodes": True,
}


def default_layer_split(layers: int, stages: int) -> tuple[int, ...]:
    """vLLM's split: even, remainder layers added from the second-to-last stage backwards."""
    split = [layers // stages] * stages
    for i in range(2, layers % stages + 2):
        split[-i] += 1
    return tuple(split)


def parse_layer_split(text: str) -> tuple[int, ...] | None:
    """Comma-separated layer counts (31,30), or `default` for vLLM's split of whatever pipeline runs."""
    if text.strip() == "default":
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"layer_split: expected comma-separated layer counts such as 31,30, got {text!r}") from None


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: must be a positive integer, got {value!r}")
    return value


DERIVED = ("virtual_stages", "layer_split", "kv_capacity")  # blank: derived by `resolve()`


def parse_value(name: str, value: object) -> object:
    """One field's value as an operator writes it (text such as "8k", "31,30" or "on") in the field's own type.

    A knob is parsed by its declaration, the cluster shape by its own rule;
    blank text leaves a derived field to `resolve()`. A one-line ConfigError
    names the field and what it takes otherwise.
    """
    declared = knob_named(name)
    if declared is not None:
        return declared.check(value)
    if not isinstance(value, str):
        return value
    text = value.strip()
    if name in DERIVED and text in ("", "default"):
        return None
    if name == "layer_split":
        return parse_layer_split(text)
    if name == "kv_capacity":
        return parse_tokens(text, name)
    if name in ("tp", "pp", "virtual_stages"):
        try:
            return _positive_int(name, int(text))
        except ValueError:
            raise ConfigError(f"{name}: must be a positive integer, got {value!r}") from None
    return text


@dataclass(frozen=True)
class RawConfig:
    """A config as the command line or the Config form gives it: values by field name, text such as "8k" allowed.

    `parse()` turns it into the typed `ServingConfig` (whose `resolve()`
    then checks the values together); nothing else makes one.
    """

    given: tuple[tuple[str, object], ...]

    @classmethod
    def of(cls, values: dict[str, object]) -> RawConfig:
        """The raw values by field name."""
        return cls(tuple(values.items()))

    def parse(self) -> ServingConfig:
        """Each value in its field's type; a one-line ConfigError naming the first that does not parse."""
        return ServingConfig.of(**{name: parse_value(name, value) for name, value in self.given})


P = TypeVar("P")


class Part(Protocol):
    """A config part as the config holds it: a dataclass instance (frozen, as `register_part` checks)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[object]]]


def layers_per_rank(stage_ranks: tuple[int, ...], layer_split: tuple[int, ...], pp: int) -> list[int]:
    """Layers held by each of `pp` ranks when virtual stage i, of layer_split[i] layers, runs on stage_ranks[i]."""
    per_rank = [0] * pp
    for rank, count in zip(stage_ranks, layer_split):
        per_rank[rank] += count
    return per_rank


class _Flat:
    """The flat view that `ServingConfig` and `ResolvedConfig` share, read through the parts each holds."""

    extra_parts: tuple[Part, ...]

    def parts(self) -> tuple[Part, ...]:
        """Every part held: the built-in ones in field order, then those registered beyond them."""
        return (*(getattr(self, slot) for slot in _part_slots()), *self.extra_parts)

    def part(self, part: type[P]) -> P:
        """The part of type `part` held (built-in or registered beyond them); a registered part that is not
        held comes at its defaults."""
        for held in self.parts():
            if isinstance(held, part):
                return held
        if part not in PARTS:
            raise KeyError(f"{part.__name__}: not a part of the config")
        return part()

    def values(self) -> dict[str, object]:
        """Every field by name: the deployment's, then each part's, registered parts not held at their defaults."""
        held = self.parts()
        defaults = tuple(part() for part in PARTS if not any(type(h) is part for h in held))
        flat = {name: getattr(self, name) for name in _deployment_names()}
        for part in (*held, *defaults):
            flat.update((f.name, getattr(part, f.name)) for f in dataclasses.fields(part))
        return flat

    def replace(self, **changes: object) -> ServingConfig:
        """An unresolved copy with some fields changed, by flat name (derived fields are re-derived on resolve)."""
        return ServingConfig.of(**{**self.values(), **changes})

    def to_dict(self) -> dict[str, object]:
        """Plain-data view (for JSON, the store and exports): every field and knob by flat name."""
        data = self.values()
        split = data["layer_split"]
        data["layer_split"] = list(split) if isinstance(split, tuple) else split
        return data


@dataclass(frozen=True, kw_only=True)
class ServingConfig(_Flat):
    """One deployment as asked, not yet validated: what is served and one part per concern (backends/parts.py).

    `parallelism.layer_split`, `parallelism.virtual_stages` and
    `memory.kv_capacity` are derived when left as None. Call `resolve()` to
    validate every value and fill them in; `of()` builds one from flat values.
    """

    model: str = "deepseek-v3.1"
    hardware: str = "ascend-910c"
    mode: str = "cpp"
    parallelism: Parallelism = field(default_factory=Parallelism)
    scheduling: Scheduling = field(default_factory=Scheduling)
    memory: Memory = field(default_factory=Memory)
    dcpp: DcppSettings = field(default_factory=DcppSettings)
    fastpp: FastPPSettings = field(default_factory=FastPPSettings)
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    delay: DelaySettings = field(default_factory=DelaySettings)
    extra_parts: tuple[Part, ...] = ()  # instances of the parts registered beyond the ones above

    @cached_property
    def model_profile(self) -> ModelProfile:
        try:
            return load_model(self.model)
        except ProfileError as err:
            raise ConfigError(str(err)) from None

    @cached_property
    def hardware_profile(self) -> HardwareProfile:
        try:
            return load_hardware(self.hardware)
        except ProfileError as err:
            raise ConfigError(str(err)) from None

    @classmethod
    def of(cls, **values: object) -> ServingConfig:
        """A config from flat values by field name (`ServingConfig.of(tp=8, chunk="16k")`), each put in its part,
        every other field at its default; an unknown name is a ConfigError naming the allowed ones."""
        slots, extras, owner = _part_slots(), _extra_parts(), _owners()
        unknown = sorted(set(values) - set(owner))
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a config field; allowed: {', '.join(sorted(owner))}")
        given: defaultdict[object, dict[str, object]] = defaultdict(dict)
        for name, value in values.items():
            given[owner[name]][name] = value
        # by name, each as given (text or number alike): resolve() checks the types, which no annotation can say here
        fields: dict[str, Any] = {name: values[name] for name in _deployment_names() if name in values}
        fields |= {slot: part(**given[slot]) for slot, part in slots.items()}
        fields["extra_parts"] = tuple(part(**given[part]) for part in extras)
        return cls(**fields)

    def resolve(self) -> ResolvedConfig:
        """Validate every field and fill in the derived ones; raise ConfigError on the first bad one."""
        if self.mode not in MODES:
            raise ConfigError(f"mode: unknown mode {self.mode!r}; allowed: {', '.join(MODES)}")
        spec = MODES[self.mode]
        model, hw = self.model_profile, self.hardware_profile
        asked = self.parallelism
        tp = _positive_int("tp", asked.tp)
        pp = _positive_int("pp", asked.pp)
        if model.num_heads % tp:
            allowed = [d for d in range(1, model.num_heads + 1) if model.num_heads % d == 0]
            raise ConfigError(
                f"tp: must divide {model.name}'s {model.num_heads} attention heads; allowed: {', '.join(map(str, allowed))}"
            )
        if spec.layout == "foldback" and pp < 2:
            raise ConfigError(
                f"pp: mode {self.mode} folds the pipeline back over the ranks and needs pp >= 2, got {pp}"
            )
        virtual = spec.virtual_stages if asked.virtual_stages is None else asked.virtual_stages
        if virtual != spec.virtual_stages:
            raise ConfigError(
                f"virtual_stages: mode {self.mode} runs {spec.virtual_stages} virtual stage(s) per rank, got {virtual}"
            )
        stages = pp * virtual
        if stages > model.num_layers:
            raise ConfigError(f"pp: {stages} stages exceed {model.name}'s {model.num_layers} layers")
        split = asked.layer_split
        if split is None:
            split = default_layer_split(model.num_layers, stages)
        split = tuple(split)
        if len(split) != stages or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in split):
            raise ConfigError(
                f"layer_split: needs {stages} positive layer counts (pp x virtual stages), got {','.join(map(str, split))}"
            )
        if sum(split) != model.num_layers:
            raise ConfigError(f"layer_split: must sum to {model.name}'s {model.num_layers} layers, got {sum(split)}")
        values = self.values()
        checked = self.replace(**{k.field: k.check(values[k.field]) for k in declared_knobs()})
        per_rank = layers_per_rank(LAYOUTS[spec.layout](pp), split, pp)
        weights = weight_bytes_per_device(model, tp, max(per_rank)) / 1e9
        rank = hw.per_rank(tp * pp)
        if weights > rank.memory_gb * rank.memory_utilization:
            where = f"its share of {hw.name}" if rank is not hw else hw.name
            raise ConfigError(
                f"tp: {model.name} needs {weights:.0f} GB of weights per device at tp={tp} pp={pp}, "
                f"more than {where}'s {rank.memory_gb * rank.memory_utilization:.0f} GB usable; use more devices"
            )
        if self.memory.kv_capacity is None:
            capacity = kv_capacity_tokens(model, rank, tp, per_rank)
            if capacity < 1:
                raise ConfigError(
                    f"kv_capacity: no memory left for KV cache after {weights:.0f} GB of weights per device; use more devices"
                )
        else:
            capacity = parse_tokens(self.memory.kv_capacity, "kv_capacity")
        return ResolvedConfig(
            model=self.model,
            hardware=self.hardware,
            mode=self.mode,
            parallelism=ResolvedParallelism(tp=tp, pp=pp, virtual_stages=virtual, layer_split=split),
            scheduling=checked.scheduling,
            memory=ResolvedMemory(kv_capacity=capacity),
            dcpp=checked.dcpp,
            fastpp=checked.fastpp,
            adaptive=checked.adaptive,
            delay=checked.delay,
            extra_parts=checked.extra_parts,
            model_profile=model,
            hardware_profile=hw,
        )

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ServingConfig:
        """Inverse of `to_dict`; unknown keys are a ConfigError."""
        values = dict(data)
        split = values.get("layer_split")
        if isinstance(split, (list, tuple)):
            values["layer_split"] = tuple(split)
        return cls.of(**values)


@dataclass(frozen=True, kw_only=True)
class ResolvedConfig(_Flat):
    """A validated config, built only by `ServingConfig.resolve()`: the same fields, every derived one filled in,
    and the profiles it was resolved against.

    `replace` gives back an unresolved ServingConfig, since changed fields
    need validating again.
    """

    model: str
    hardware: str
    mode: str
    parallelism: ResolvedParallelism
    scheduling: Scheduling
    memory: ResolvedMemory
    dcpp: DcppSettings
    fastpp: FastPPSettings
    adaptive: AdaptiveSettings
    delay: DelaySettings
    extra_parts: tuple[Part, ...]
    model_profile: ModelProfile = field(compare=False, repr=False)
    hardware_profile: HardwareProfile = field(compare=False, repr=False)

    @property
    def mode_spec(self) -> ModeSpec:
        return MODES[self.mode]

    @property
    def devices(self) -> int:
        return self.parallelism.tp * self.parallelism.pp

    @property
    def rank_hardware(self) -> HardwareProfile:
        """What each rank runs on: the hardware profile's device, or its share where the ranks share one."""
        return self.hardware_profile.per_rank(self.devices)

    @property
    def stage_ranks(self) -> tuple[int, ...]:
        """The rank each virtual stage runs on, in execution order."""
        return LAYOUTS[self.mode_spec.layout](self.parallelism.pp)

    def layers_per_rank(self) -> list[int]:
        """Layers held by each rank."""
        return layers_per_rank(self.stage_ranks, self.parallelism.layer_split, self.parallelism.pp)

    def resolve(self) -> ResolvedConfig:
        """Already resolved."""
        return self


@functools.cache
def _part_slots() -> dict[str, type[Part]]:
    """The config's part fields and the part each holds: the fields of `ServingConfig` a part class fills in."""
    slots = {}
    for f in dataclasses.fields(ServingConfig):
        part: object = f.default_factory
        if isinstance(part, type) and dataclasses.is_dataclass(part):
            slots[f.name] = part
    return slots


def _extra_parts() -> list[type[Part]]:
    """The parts registered beyond the ones `ServingConfig` declares a field for, in registration order."""
    built_in = _part_slots().values()
    return [part for part in PARTS if part not in built_in]


def _owners() -> dict[str, object]:
    """What holds each flat name: the config itself (the name), a built-in part (its field's name) or a part
    registered beyond them (the part); TypeError if two parts declare the same name."""
    owner: dict[str, object] = {name: name for name in _deployment_names()}
    holders = [*_part_slots().items(), *((part, part) for part in _extra_parts())]
    for holder, part in holders:
        for f in dataclasses.fields(part):
            if f.name in owner:
                raise TypeError(f"{part.__name__}: its field {f.name} is already a config field")
            owner[f.name] = holder
    return owner


def field_hints() -> dict[str, object]:
    """Each flat field's type hint, in `values()` order: what is served, then every part's fields."""
    hints = typing.get_type_hints(ServingConfig)
    flat = {name: hints[name] for name in _deployment_names()}
    for part in (*_part_slots().values(), *_extra_parts()):
        flat |= typing.get_type_hints(part)
    return flat


@functools.cache
def _deployment_names() -> tuple[str, ...]:
    """The config's own fields, which name what is served: every field but the parts."""
    slots = _part_slots()
    return tuple(f.name for f in dataclasses.fields(ServingConfig) if f.name not in slots and f.name != "extra_parts")
