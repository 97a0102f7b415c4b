"""The Config form's fields, generated at run time from the config's flat fields and the registered modes."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import NoneType

from ...backends import (
    MODES,
    Knob,
    ResolvedConfig,
    ServingConfig,
    backend_entry,
    field_hints,
    hardware_names,
    knob_named,
    model_names,
    parse_value,
)

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
    """Every config field and declared knob, in declaration order; a declared knob brings its choices and help."""
    fields = []
    for name, hint in field_hints().items():
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        optional = NoneType in typing.get_args(hint)
        base = args[0] if optional and len(args) == 1 else hint
        value_type = typing.get_origin(base) or base
        knob = knob_named(name)
        help_text = f"{knob.help} Allowed: {knob.allowed()}." if knob else ""
        if name in CHOICES:
            fields.append(FormField(name, "choice", str, optional, tuple(CHOICES[name]())))
        elif knob is not None and knob.kind == "choice":
            fields.append(FormField(name, "choice", str, optional, knob.choices, help_text))
        elif value_type is bool:
            fields.append(FormField(name, "bool", bool, optional, help=help_text))
        else:
            fields.append(FormField(name, "text", value_type, optional, help=help_text))  # type: ignore[arg-type]
    return fields


def shown_for(field: str, mode: str, backend: str) -> bool:
    """Whether the form shows `field` while `mode` is selected for a run on `backend`: general fields always, a
    knob that only some modes read (its declared `modes`) for those modes, if the backend reads it."""
    knob: Knob | None = knob_named(field)
    return knob is None or (knob.applies_to(mode) and backend_entry(backend).capabilities.reads(knob))


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
    """The form's text as a field value, parsed as the command line parses it; a derived field left blank is None."""
    if not text.strip() and field.optional:
        return None
    return parse_value(field.name, text)


def error_field(message: str, names: Iterable[str]) -> str | None:
    """The field an error names by its `<field>: ` prefix, if it is one of `names`."""
    head, sep, _ = message.partition(": ")
    return head if sep and head in set(names) else None


def normalised(draft: ServingConfig, resolved: ResolvedConfig) -> ServingConfig:
    """The draft with every value it gives replaced by its resolved form (24k -> 24576); derived fields stay None."""
    given, acting = draft.values(), resolved.values()
    return draft.replace(**{name: acting[name] for name, value in given.items() if value is not None})
