"""The Config form's fields, generated at run time from ServingConfig's dataclass fields and the registered modes."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import NoneType

from ...backends import KNOB_BY_FIELD, MODES, ConfigError, ServingConfig, hardware_names, model_names

CHOICES: dict[str, Callable[[], list[str]]] = {
    "model": model_names,
    "hardware": hardware_names,
    "mode": lambda: list(MODES),
}


@dataclass(frozen=True)
class FormField:
    """One ServingConfig field as the form shows it."""

    name: str
    kind: str  # "choice", "bool" or "text"
    value_type: type  # int, float, str, bool or tuple (None stripped)
    optional: bool  # blank means "derive it" (None)
    choices: tuple[str, ...] = ()
    help: str = ""  # what the knob does and what it takes, from backends/knobs.py

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def form_fields() -> list[FormField]:
    """Every ServingConfig field, in declaration order; a declared knob brings its choices and help."""
    hints = typing.get_type_hints(ServingConfig)
    fields = []
    for f in dataclasses.fields(ServingConfig):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        optional = NoneType in typing.get_args(hint)
        base = args[0] if optional and len(args) == 1 else hint
        value_type = typing.get_origin(base) or base
        knob = KNOB_BY_FIELD.get(f.name)
        help_text = f"{knob.help} Allowed: {knob.allowed()}." if knob else ""
        if f.name in CHOICES:
            fields.append(FormField(f.name, "choice", str, optional, tuple(CHOICES[f.name]())))
        elif knob is not None and knob.kind == "choice":
            fields.append(FormField(f.name, "choice", str, optional, knob.choices, help_text))
        elif value_type is bool:
            fields.append(FormField(f.name, "bool", bool, optional, help=help_text))
        else:
            fields.append(FormField(f.name, "text", value_type, optional, help=help_text))
    return fields


def mode_only_fields() -> frozenset[str]:
    """Fields that only some modes read (a mode's `params`)."""
    return frozenset(name for spec in MODES.values() for name in spec.params)


def shown_for(field: str, mode: str) -> bool:
    """Whether the form shows `field` while `mode` is selected: general fields always, mode fields for their mode."""
    return field not in mode_only_fields() or (mode in MODES and field in MODES[mode].params)


def to_text(value: object) -> str:
    """A field value as the form's text (None is blank: derived)."""
    if value is None:
        return ""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def parse(field: FormField, text: str) -> object:
    """The form's text as a field value; text that is not a number is passed on for `resolve()` to explain."""
    text = text.strip()
    if not text and field.optional:
        return None
    if field.value_type is tuple:
        try:
            return tuple(int(part) for part in text.split(","))
        except ValueError:
            raise ConfigError(
                f"{field.name}: expected comma-separated whole numbers such as 31,30, got {text!r}"
            ) from None
    if field.value_type in (int, float):
        try:
            return field.value_type(text)
        except ValueError:
            return text
    return text


def error_field(message: str, names: Iterable[str]) -> str | None:
    """The field an error names by its `<field>: ` prefix, if it is one of `names`."""
    head, sep, _ = message.partition(": ")
    return head if sep and head in set(names) else None


def normalised(draft: ServingConfig, resolved: ServingConfig) -> ServingConfig:
    """The draft with every value it gives replaced by its resolved form (24k -> 24576); derived fields stay None."""
    return draft.replace(
        **{f.name: getattr(resolved, f.name) for f in dataclasses.fields(draft) if getattr(draft, f.name) is not None}
    )
