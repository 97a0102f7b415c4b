"""A knob is declared once, as a field of a config part: `field: int = knob(256, help=..., low=1, ...)`.

The `Knob` record in the field's metadata says everything the rest of
pipedeck derives from it: validation (`ServingConfig.resolve()`), the CLI
option (console/options.py), the tuner's search dimension (tuner/space.py),
the Config form (console/tui), each engine's spelling of it
(backends/launch.py) and so which backends read it: a simulator every knob,
a live server only those an engine is launched with (`Capabilities.reads`).
`declared_knobs()` lists every knob by walking the registered parts
(backends/parts.py); `register_part` adds a part.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .tokens import parse_tokens

KINDS = ("tokens", "int", "float", "bool", "choice")


@dataclass(frozen=True, kw_only=True)
class Search:
    """How the tuner samples a knob: a range (`log` scale, `step`) or `choices`, only while `when` (a switch) is on.

    The modes it is searched in are the knob's own `modes`.
    """

    low: float = 0
    high: float = 0
    log: bool = False
    step: int | None = None
    choices: tuple[object, ...] = ()
    when: str = ""  # a bool knob that must be on for this one to be searched ("": always)


@dataclass(frozen=True, kw_only=True)
class EngineFlag:
    """How one serving engine takes a knob: its option names, or the setting its launch writes the knob into
    (neither: the engine runs its own default), and that default.

    A bool knob's flags are switches passed when it is on; any other knob's
    flags each take the value. `with_flags` are switches passed beside it.
    `set_by` names what carries the knob when it is not an option of its
    own (written by the mode's or the engine's launch in backends/launch.py).
    """

    flags: tuple[str, ...] = ()
    with_flags: tuple[str, ...] = ()
    set_by: str = ""  # e.g. "--additional-config profiling_chunk_config.min_chunk", "env SGLANG_..."
    default: object = None  # the engine's own value when not told (None: not recorded)

    @property
    def launched(self) -> bool:
        """Whether the engine is launched with the knob's value (an option or `set_by`), not its own default."""
        return bool(self.flags or self.set_by)


@dataclass(frozen=True, kw_only=True)
class Knob:
    """One knob: its config field, what values it takes, what it does, where it applies and how it is set."""

    field: str = ""  # filled in from the part's field name by `declared_knobs()`
    kind: str  # tokens, int, float, bool or choice
    help: str
    unit: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the low bound itself is not allowed
    choices: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()  # the pipeline modes that read it (empty: every mode)
    search: Search | None = None  # None: the tuner never samples it by this declaration
    engines: Mapping[str, EngineFlag] = dataclasses.field(default_factory=dict)

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")

    def applies_to(self, mode: str) -> bool:
        """Whether `mode` reads this knob."""
        return not self.modes or mode in self.modes

    @property
    def set_at_launch(self) -> bool:
        """Whether a serving engine is launched with it (`engines`); if none is, only a model of the engine's
        scheduler reads it (a backend says which knobs it reads: `Capabilities.reads`)."""
        return any(way.launched for way in self.engines.values())

    def allowed(self) -> str:
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        if self.kind == "bool":
            return "on or off"
        if self.high is None and self.low is not None:
            positive = self.low > 0 or self.low_open
            noun = "integer" if self.kind in ("int", "tokens") else "number"
            return f"a {'positive' if positive else 'non-negative'} {noun}" + (
                f" of at least {self.low:g}" if self.low > 1 else ""
            )
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"

    def check(self, value: object) -> object:
        """The value normalised, or a one-line ConfigError naming the field and what is allowed."""
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("on", "true", "1", "yes"):
                return True
            if text in ("off", "false", "0", "no"):
                return False
            raise ConfigError(f"{self.field}: must be {self.allowed()}, got {value!r}")
        if self.kind == "choice":
            if value not in self.choices:
                raise ConfigError(f"{self.field}: must be {self.allowed()}, got {value!r}")
            return value
        if self.kind == "tokens":
            number: float = parse_tokens(value, self.field)  # type: ignore[arg-type]
        else:
            try:
                number = float(value) if self.kind == "float" else int(str(value))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise ConfigError(f"{self.field}: must be a number {self.allowed()}, got {value!r}") from None
            if isinstance(value, bool) or not math.isfinite(number):
                raise ConfigError(f"{self.field}: must be a number {self.allowed()}, got {value!r}")
        too_low = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        if too_low or (self.high is not None and number > self.high):
            raise ConfigError(f"{self.field}: must be {self.allowed()}, got {value!r}")
        return number


def knob(default: object, **declaration: Any) -> Any:
    """A config part's field declared as a knob: its default, and `Knob`'s other attributes by keyword."""
    if declaration.get("kind") not in KINDS:
        raise TypeError(f"knob kind must be one of {', '.join(KINDS)}, got {declaration.get('kind')!r}")
    return field(default=default, metadata={"knob": Knob(**declaration)})


PARTS: list[type] = []  # the config parts whose knobs are declared, in the order their options are listed


def register_part(part: type) -> type:
    """Add a frozen dataclass whose knob fields join the config, the CLI, the search, the form and the launch."""
    if not dataclasses.is_dataclass(part) or not part.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{part.__name__}: a config part must be a frozen dataclass")
    if part not in PARTS:
        PARTS.append(part)
    return part


@contextmanager
def registered_part(part: type) -> Iterator[type]:
    """`part` registered for the duration of a block (a plugin's tests), removed after unless it was already."""
    added = part not in PARTS
    register_part(part)
    try:
        yield part
    finally:
        if added:
            PARTS.remove(part)


def knob_fields(part: type) -> list[dataclasses.Field[Any]]:
    """The fields of `part` declared with `knob()`."""
    return [f for f in dataclasses.fields(part) if "knob" in f.metadata]


def declared_knobs() -> tuple[Knob, ...]:
    """Every declared knob, part by part in registration order, each named after its field."""
    return _knobs_of(tuple(PARTS))


@functools.cache
def _knobs_of(parts: tuple[type, ...]) -> tuple[Knob, ...]:
    return tuple(dataclasses.replace(f.metadata["knob"], field=f.name) for part in parts for f in knob_fields(part))


def knob_named(name: str) -> Knob | None:
    """The declared knob of config field `name`, if it is one."""
    return _knobs_by_name(tuple(PARTS)).get(name)


@functools.cache
def _knobs_by_name(parts: tuple[type, ...]) -> dict[str, Knob]:
    return {knob.field: knob for knob in _knobs_of(parts)}


def knob_default(name: str) -> object:
    """The default of declared knob `name`."""
    for part in PARTS:
        for f in knob_fields(part):
            if f.name == name:
                return f.default
    raise KeyError(name)


def setting_text(value: object) -> str:
    """A knob's value as `--fix` takes it: on/off for a switch, floats to four digits (0.9975 for an RLS
    forgetting factor), anything else as it is."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:.4g}" if isinstance(value, float) else str(value)
