"""`ServingConfig`, one serving deployment as asked (the sum of its parts), and `ResolvedConfig`, the same validated.

`RawConfig` holds what the command line or the Config form gave (text such
as "8k"); its `parse()` gives a `ServingConfig` whose fields hold their own
types. `ServingConfig.resolve()` validates every field before any work and returns a
`ResolvedConfig`: derived fields filled in (layer split, virtual stages, KV
capacity) and the model and hardware profiles it was resolved against. The
backends run resolved configs only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from .errors import ConfigError
from .knobs import declared_knobs, knob_default, knob_named
from .memory import kv_capacity_tokens, weight_bytes_per_device
from .parts import (
    AdaptiveSettings,
    DcppSettings,
    DelaySettings,
    Deployment,
    FastPPSettings,
    Memory,
    Parallelism,
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
        return ServingConfig.from_values({name: parse_value(name, value) for name, value in self.given})


P = TypeVar("P")


@dataclass(frozen=True)
class ServingConfig(
    DelaySettings, AdaptiveSettings, FastPPSettings, DcppSettings, Memory, Scheduling, Parallelism, Deployment
):
    """One deployment as asked: the sum of the config parts (backends/parts.py), not yet validated.

    Its fields are the parts' fields: the deployment, the cluster shape and
    every knob of the built-in parts. Knobs of parts registered beyond those
    (`register_part`) are kept in `extra_knobs`, by name. `layer_split`,
    `virtual_stages` and `kv_capacity` are derived when left as None. Call
    `resolve()` to validate every value and fill them in.
    """

    extra_knobs: tuple[tuple[str, object], ...] = ()

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

    @property
    def mode_spec(self) -> ModeSpec:
        return MODES[self.mode]

    @property
    def devices(self) -> int:
        return self.tp * self.pp

    @property
    def stage_ranks(self) -> tuple[int, ...]:
        """The rank each virtual stage runs on, in execution order."""
        return LAYOUTS[self.mode_spec.layout](self.pp)

    def layers_per_rank(self) -> list[int]:
        """Layers held by each rank under the resolved split."""
        per_rank = [0] * self.pp
        for rank, count in zip(self.stage_ranks, self.layer_split or ()):
            per_rank[rank] += count
        return per_rank

    def part(self, part: type[P]) -> P:
        """The values of one config part (backends/parts.py, or one registered beyond them) as that part."""
        values = self.values()
        return part(**{f.name: values[f.name] for f in dataclasses.fields(part)})  # type: ignore[arg-type]

    def replace(self, **changes: object) -> ServingConfig:
        """An unresolved copy with some fields changed (derived fields are re-derived on resolve)."""
        return ServingConfig.from_values({**self.values(), **changes})

    def values(self) -> dict[str, object]:
        """Every field by name, the knobs of registered parts beyond the built-in ones included."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(ServingConfig) if f.name != "extra_knobs"}
        extra = {k.field: knob_default(k.field) for k in declared_knobs() if k.field not in fields}
        return {**fields, **extra, **dict(self.extra_knobs)}

    @classmethod
    def from_values(cls, values: dict[str, object]) -> ServingConfig:
        """A config from values by field name; a declared knob of a registered part is kept by name,
        any other unknown name is a ConfigError naming the allowed ones."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra_knobs"}
        declared = {k.field for k in declared_knobs()}
        unknown = sorted(set(values) - names - declared)
        if unknown:
            raise ConfigError(f"{unknown[0]}: not a config field; allowed: {', '.join(sorted(names | declared))}")
        extra = tuple((name, value) for name, value in values.items() if name not in names)
        return cls(**{name: value for name, value in values.items() if name in names}, extra_knobs=extra)  # type: ignore[arg-type]

    def resolve(self) -> ResolvedConfig:
        """Validate every field and fill in the derived ones; raise ConfigError on the first bad one."""
        if self.mode not in MODES:
            raise ConfigError(f"mode: unknown mode {self.mode!r}; allowed: {', '.join(MODES)}")
        spec = self.mode_spec
        model, hw = self.model_profile, self.hardware_profile
        tp = _positive_int("tp", self.tp)
        pp = _positive_int("pp", self.pp)
        if model.num_heads % tp:
            allowed = [d for d in range(1, model.num_heads + 1) if model.num_heads % d == 0]
            raise ConfigError(
                f"tp: must divide {model.name}'s {model.num_heads} attention heads; allowed: {', '.join(map(str, allowed))}"
            )
        if spec.layout == "foldback" and pp < 2:
            raise ConfigError(
                f"pp: mode {self.mode} folds the pipeline back over the ranks and needs pp >= 2, got {pp}"
            )
        virtual = spec.virtual_stages if self.virtual_stages is None else self.virtual_stages
        if virtual != spec.virtual_stages:
            raise ConfigError(
                f"virtual_stages: mode {self.mode} runs {spec.virtual_stages} virtual stage(s) per rank, got {virtual}"
            )
        stages = pp * virtual
        if stages > model.num_layers:
            raise ConfigError(f"pp: {stages} stages exceed {model.name}'s {model.num_layers} layers")
        split = self.layer_split
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
        knobs = {k.field: k.check(values[k.field]) for k in declared_knobs()}
        checked = self.replace(tp=tp, pp=pp, virtual_stages=virtual, layer_split=split, **knobs)
        heaviest = max(checked.layers_per_rank())
        weights = weight_bytes_per_device(model, tp, heaviest) / 1e9
        if weights > hw.memory_gb * hw.memory_utilization:
            raise ConfigError(
                f"tp: {model.name} needs {weights:.0f} GB of weights per device at tp={tp} pp={pp}, "
                f"more than {hw.name}'s {hw.memory_gb * hw.memory_utilization:.0f} GB usable; use more devices"
            )
        if self.kv_capacity is None:
            capacity = kv_capacity_tokens(model, hw, tp, checked.layers_per_rank())
            if capacity < 1:
                raise ConfigError(
                    f"kv_capacity: no memory left for KV cache after {weights:.0f} GB of weights per device; use more devices"
                )
        else:
            capacity = parse_tokens(self.kv_capacity, "kv_capacity")
        return ResolvedConfig.of(checked.replace(kv_capacity=capacity), model, hw)

    def to_dict(self) -> dict[str, object]:
        """Plain-data view (for JSON, the store and exports): every field and knob by name."""
        data = self.values()
        data["layer_split"] = list(self.layer_split) if self.layer_split is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ServingConfig:
        """Inverse of `to_dict`; unknown keys are a ConfigError."""
        values = dict(data)
        split = values.get("layer_split")
        if isinstance(split, (list, tuple)):
            values["layer_split"] = tuple(split)
        return cls.from_values(values)


class ResolvedConfig(ServingConfig):
    """A validated ServingConfig: every derived field filled in, the profiles it was resolved against kept.

    Built only by `ServingConfig.resolve()`; `replace` gives back an unresolved
    ServingConfig, since changed fields need validating again.
    """

    layer_split: tuple[int, ...]
    kv_capacity: int
    virtual_stages: int
    _profiles: tuple[ModelProfile, HardwareProfile]

    @classmethod
    def of(cls, config: ServingConfig, model: ModelProfile, hardware: HardwareProfile) -> ResolvedConfig:
        """`config`'s values, already checked, with the profiles they were checked against."""
        resolved = cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})
        object.__setattr__(resolved, "_profiles", (model, hardware))  # frozen: set once, while building
        return resolved

    @property
    def model_profile(self) -> ModelProfile:
        return self._profiles[0]

    @property
    def hardware_profile(self) -> HardwareProfile:
        return self._profiles[1]

    def resolve(self) -> ResolvedConfig:
        """Already resolved."""
        return self
