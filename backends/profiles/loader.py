"""Find and load model and hardware profiles by name or path."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from .build import P, build_profile
from .errors import ProfileError
from .hf_import import model_from_hf_config
from .schema import HardwareProfile, ModelProfile

PACKAGED = Path(
    __file__
).parent  # models/ and hardware/ ship beside this module (pipedeck installs as files, not a zip)


def model_names() -> list[str]:
    """Names of the packaged model profiles."""
    return _names("models")


def hardware_names() -> list[str]:
    """Names of the packaged hardware profiles."""
    return _names("hardware")


def load_model(name_or_path: str | os.PathLike[str]) -> ModelProfile:
    """Load a packaged model by name, a model .toml, or a config.json (file or folder)."""
    text = os.fspath(name_or_path)
    if text in model_names():
        return _load_packaged(ModelProfile, "model", "models", text)
    path = Path(text)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ProfileError(f"model: folder {text} holds no config.json")
        path = path / "config.json"
    _check_exists("model", text)
    if path.is_file() and path.suffix == ".toml":
        return build_profile(ModelProfile, _read_toml(path, f"model {path}"), f"model {path}")
    if path.is_file() and path.suffix == ".json":
        name = path.parent.name if path.name == "config.json" else path.stem
        return model_from_hf_config(_read_json(path), name or path.stem)
    raise ProfileError(
        f"model: unknown model {text!r}; known: {', '.join(model_names())} "
        "(or a path to a .toml file, a config.json or a folder holding one)"
    )


def load_hardware(name_or_path: str | os.PathLike[str]) -> HardwareProfile:
    """Load a packaged hardware profile by name or a hardware .toml file."""
    text = os.fspath(name_or_path)
    if text in hardware_names():
        return _load_packaged(HardwareProfile, "hardware", "hardware", text)
    path = Path(text)
    _check_exists("hardware", text)
    if path.is_file() and path.suffix == ".toml":
        label = f"hardware {path}"
        return build_profile(HardwareProfile, _read_toml(path, label), label)
    raise ProfileError(
        f"hardware: unknown hardware {text!r}; known: {', '.join(hardware_names())} (or a path to a .toml file)"
    )


def _check_exists(kind: str, text: str) -> None:
    """A name that is a path (it names a folder, or ends in .toml or .json) must exist: say so, not "unknown"."""
    path = Path(text)
    if (os.sep in text or "/" in text or path.suffix in (".toml", ".json")) and not path.exists():
        raise ProfileError(f"{kind}: no such file {text}")


def _names(folder: str) -> list[str]:
    """Stems of the packaged .toml files in one folder."""
    entries = (PACKAGED / folder).iterdir()
    return sorted(entry.name[: -len(".toml")] for entry in entries if entry.name.endswith(".toml"))


def _load_packaged(cls: type[P], kind: str, folder: str, name: str) -> P:
    """Build a profile from a packaged TOML file."""
    label = f"{kind} {name}.toml"
    text = (PACKAGED / folder / f"{name}.toml").read_text("utf-8")
    return build_profile(cls, _parse_toml(text, label), label)


def _read_toml(path: Path, label: str) -> dict[str, Any]:
    """Parse a TOML file, turning syntax errors into ProfileError."""
    return _parse_toml(path.read_text("utf-8"), label)


def _parse_toml(text: str, label: str) -> dict[str, Any]:
    """Parse TOML text, turning syntax errors into ProfileError."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{label}: invalid TOML: {exc}") from None


def _read_json(path: Path) -> dict[str, Any]:
    """Parse a config.json that must hold one JSON object."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: must hold a JSON object, got {type(data).__name__}")
    return data
