"""Write a profile back as TOML: every field, its [sources], [checkpoints] and record tables such as [calibration].

The text is what the loader reads: top-level fields in the dataclass's
order, then `[sources]` with one line per numeric field, then a model's
`[checkpoints.<platform>]` tables, then each record
table (nested tables and arrays of tables included). Strings are written as
TOML basic strings, which take JSON's escapes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from .build import sourced_fields
from .schema import HardwareProfile, ModelProfile


def profile_toml(
    profile: ModelProfile | HardwareProfile, records: Mapping[str, Mapping[str, Any]] | None = None, comment: str = ""
) -> str:
    """The TOML text of `profile`, with `records` as extra tables and `comment` as leading # lines.

    Every numeric or true/false field written needs a source in `profile.sources`; a ValueError names the first
    without one. A true/false field at its default without a source is left out, as a profile read without it.
    """
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    fields = [f for f in dataclasses.fields(profile) if f.name not in ("sources", "checkpoints")]
    written = [
        f.name
        for f in fields
        if not isinstance(f.default, bool) or getattr(profile, f.name) != f.default or f.name in profile.sources
    ]
    lines += [f"{name} = {_value(getattr(profile, name))}" for name in written]
    lines += ["", "[sources]"]
    for name in (name for name in sourced_fields(type(profile)) if name in written):
        source = profile.sources.get(name)
        if not source:
            raise ValueError(f"{name}: no source to write for {profile.name}")
        lines.append(f"{name} = {_value(source)}")
    checkpoints = {
        platform: dataclasses.asdict(entry) for platform, entry in getattr(profile, "checkpoints", {}).items()
    }
    for name, table in (({"checkpoints": checkpoints} if checkpoints else {}) | dict(records or {})).items():
        _table(lines, name, table)
    return "\n".join(lines) + "\n"


def _table(lines: list[str], path: str, table: Mapping[str, Any]) -> None:
    """Append `[path]`: its plain values, then its sub-tables, then its arrays of tables."""
    lines += ["", f"[{path}]"]
    nested = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    arrays = {k: v for k, v in table.items() if isinstance(v, list | tuple) and v and isinstance(v[0], Mapping)}
    lines += [f"{k} = {_value(v)}" for k, v in table.items() if k not in nested and k not in arrays]
    for key, sub in nested.items():
        _table(lines, f"{path}.{key}", sub)
    for key, rows in arrays.items():
        for row in rows:
            lines += ["", f"[[{path}.{key}]]"]
            lines += [f"{k} = {_value(v)}" for k, v in row.items()]


def _value(value: Any) -> str:
    """A TOML value: a bool, an integer, a finite float, a string or a list of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"cannot write {value} to a profile")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write a {type(value).__name__} to a profile")
