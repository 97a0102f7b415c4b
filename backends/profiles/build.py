"""Build a profile dataclass from plain data, checking types, ranges and sources."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import ProfileError
from .schema import HUBS, PLATFORMS, Checkpoint, HardwareProfile, ModelProfile

P = TypeVar("P", ModelProfile, HardwareProfile)

ATTENTION_KINDS = ("gqa", "mla")
_POSITIVE = {
    ModelProfile: (
        "num_layers",
        "hidden_size",
        "vocab_size",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "weight_bytes",
        "kv_bytes",
    ),
    HardwareProfile: (
        "memory_gb",
        "memory_bandwidth_gbs",
        "peak_tflops",
        "collective_bandwidth_gbs",
        "p2p_bandwidth_gbs",
    ),
}
_FRACTIONS = (
    "matmul_efficiency",
    "attention_efficiency",
    "memory_efficiency",
    "memory_utilization",
)
# Tables a profile file may carry as a record for its readers; the cost model reads none of them.
# [calibration]: the runs `pipedeck calibrate` fitted the hardware's constants to, and its errors.
_RECORDS = {ModelProfile: (), HardwareProfile: ("calibration",)}


def _fields_of_type(cls: type[ModelProfile] | type[HardwareProfile], kinds: tuple[type, ...]) -> tuple[str, ...]:
    """Names of the fields of a profile class whose type is one of `kinds`."""
    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if hints[f.name] in kinds)


def numeric_fields(cls: type[ModelProfile] | type[HardwareProfile]) -> tuple[str, ...]:
    """Names of the int and float fields of a profile class."""
    return _fields_of_type(cls, (int, float))


def sourced_fields(cls: type[ModelProfile] | type[HardwareProfile]) -> tuple[str, ...]:
    """Names of the fields a profile must source when it gives them: its numbers and its yes/no mechanisms."""
    return _fields_of_type(cls, (int, float, bool))


# A field a profile may leave out, taking another field's value: (that field, the source recorded for it).
_FALLBACKS: dict[type, dict[str, tuple[str, str]]] = {
    HardwareProfile: {
        "graph_collective_latency_us": (
            "collective_latency_us",
            "not in the profile: decode steps pay the eager collective latency (no graph replay figure was given)",
        )
    },
}


def build_profile(cls: type[P], data: Mapping[str, Any], label: str) -> P:
    """Return a `cls` built from `data` (fields plus a `sources` table), or raise ProfileError."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "sources"}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "sources":
            continue
        if cls is ModelProfile and key == "checkpoints":
            values[key] = _checkpoints(label, value)
            continue
        if key in _RECORDS[cls]:
            if not isinstance(value, Mapping):
                raise ProfileError(f"{label}: [{key}] must be a table, got {value!r}")
            continue
        if key not in fields:
            raise ProfileError(f"{label}: unknown field {key!r}; allowed: {', '.join(fields)}")
        values[key] = _typed(label, key, hints[key], value)
    given_sources = data.get("sources", {})
    for name, (other, why) in _FALLBACKS.get(cls, {}).items():
        if name not in values and other in values:
            values[name] = values[other]
            if isinstance(given_sources, Mapping):  # else _sources refuses it, in one line
                given_sources = {**given_sources, name: why}
    for name, spec in fields.items():
        if name not in values and spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise ProfileError(f"{label}: missing field {name!r}")
    sources = _sources(label, given_sources, values, sourced_fields(cls))
    profile = cls(**values, sources=sources)
    _check_ranges(profile, label)
    if isinstance(profile, ModelProfile):
        _check_model(profile, label)
    else:
        _check_hardware(profile, label)
    return profile


def _typed(label: str, key: str, kind: Any, value: Any) -> Any:
    """Return `value` as the field's type, or raise naming the field and the type wanted."""
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ProfileError(f"{label}: field {key!r} must be an integer, got {value!r}")
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ProfileError(f"{label}: field {key!r} must be true or false, got {value!r}")
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ProfileError(f"{label}: field {key!r} must be a number, got {value!r}")
    if isinstance(value, str):
        return value
    raise ProfileError(f"{label}: field {key!r} must be a string, got {value!r}")


def _checkpoints(label: str, raw: Any) -> dict[str, Checkpoint]:
    """The [checkpoints.<platform>] tables: a known platform, an id, a source, a known hub, string fields only."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{label}: [checkpoints] must hold one table per platform, got {raw!r}")
    allowed = [f.name for f in dataclasses.fields(Checkpoint)]
    found: dict[str, Checkpoint] = {}
    for platform, entry in raw.items():
        where = f"{label}: [checkpoints.{platform}]"
        if platform not in PLATFORMS:
            raise ProfileError(f"{where}: unknown platform; allowed: {', '.join(PLATFORMS)}")
        if not isinstance(entry, Mapping):
            raise ProfileError(f"{where} must be a table, got {entry!r}")
        for key, value in entry.items():
            if key not in allowed:
                raise ProfileError(f"{where}: unknown field {key!r}; allowed: {', '.join(allowed)}")
            if not isinstance(value, str):
                raise ProfileError(f"{where}: field {key!r} must be a string, got {value!r}")
        for key in ("id", "source"):
            if not str(entry.get(key, "")).strip():
                raise ProfileError(f"{where}: field {key!r} must be a non-empty string")
        if entry.get("hub", "huggingface") not in HUBS:
            raise ProfileError(f"{where}: field 'hub' must be one of {', '.join(HUBS)}, got {entry['hub']!r}")
        found[platform] = Checkpoint(**entry)
    return found


def _sources(label: str, raw: Any, values: Mapping[str, Any], sourced: tuple[str, ...]) -> dict[str, str]:
    """Check the sources table: known fields, non-empty text, one per sourced field given."""
    if not isinstance(raw, Mapping):
        raise ProfileError(f'{label}: [sources] must be a table of field = "where it comes from"')
    for key, text in raw.items():
        if key not in sourced:
            raise ProfileError(
                f"{label}: [sources] names {key!r}, which is not a field that takes a source; allowed: {', '.join(sourced)}"
            )
        if not isinstance(text, str) or not text.strip():
            raise ProfileError(f"{label}: [sources] entry {key!r} must be a non-empty string")
    for key in sourced:
        if key in values and key not in raw:
            raise ProfileError(
                f"{label}: field {key!r} has no entry in [sources]; every numeric or true/false field needs one"
            )
    return dict(raw)


def _check_ranges(profile: ModelProfile | HardwareProfile, label: str) -> None:
    """Numbers are non-negative, size fields positive, efficiencies within (0, 1]."""
    cls = type(profile)
    for key in numeric_fields(cls):
        value = getattr(profile, key)
        if value < 0:
            raise ProfileError(f"{label}: field {key!r} must be >= 0, got {value}")
    for key in _POSITIVE[cls]:
        if getattr(profile, key) <= 0:
            raise ProfileError(f"{label}: field {key!r} must be > 0, got {getattr(profile, key)}")
    for key in _FRACTIONS:
        value = getattr(profile, key, None)
        if value is not None and not 0 < value <= 1:
            raise ProfileError(f"{label}: field {key!r} must be in (0, 1], got {value}")


def _check_model(model: ModelProfile, label: str) -> None:
    """Cross-field rules of a model: attention kind, MLA ranks, experts, layer counts."""
    if model.attention not in ATTENTION_KINDS:
        raise ProfileError(
            f"{label}: field 'attention' must be one of {', '.join(ATTENTION_KINDS)}, got {model.attention!r}"
        )
    if model.attention == "mla" and (model.kv_lora_rank == 0 or model.v_head_dim == 0):
        raise ProfileError(f"{label}: attention 'mla' needs kv_lora_rank > 0 and v_head_dim > 0")
    if model.num_experts and not 0 < model.experts_per_token <= model.num_experts:
        raise ProfileError(
            f"{label}: field 'experts_per_token' must be in 1..{model.num_experts}, got {model.experts_per_token}"
        )
    if model.num_experts and model.moe_intermediate_size == 0:
        raise ProfileError(f"{label}: field 'moe_intermediate_size' must be > 0 for a MoE model")
    dense_layers = model.first_dense_layers if model.num_experts else model.num_layers
    if dense_layers and model.intermediate_size == 0:
        raise ProfileError(f"{label}: field 'intermediate_size' must be > 0 for dense FFN layers")
    for key in ("first_dense_layers", "indexer_layers"):
        if getattr(model, key) > model.num_layers:
            raise ProfileError(
                f"{label}: field {key!r} must be <= num_layers ({model.num_layers}), got {getattr(model, key)}"
            )
    if model.index_topk and (model.index_n_heads == 0 or model.index_head_dim == 0):
        raise ProfileError(f"{label}: index_topk > 0 needs index_n_heads > 0 and index_head_dim > 0")


def _check_hardware(hardware: HardwareProfile, label: str) -> None:
    """Cross-field rules of a hardware profile: a known platform; a graph-replayed collective is no slower than an eager one."""
    if hardware.platform not in ("", *PLATFORMS):
        raise ProfileError(
            f"{label}: field 'platform' must be one of {', '.join(PLATFORMS)}, got {hardware.platform!r}"
        )
    if hardware.graph_collective_latency_us > hardware.collective_latency_us:
        raise ProfileError(
            f"{label}: field 'graph_collective_latency_us' must be <= collective_latency_us "
            f"({hardware.collective_latency_us}), got {hardware.graph_collective_latency_us}"
        )
