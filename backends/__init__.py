"""Serving backends: configs, results, profiles, policies, engines and the simulator and live backends.

What other packages may use is named here (`__all__`), each name imported
from its module on first use (PEP 562), so that importing one name loads
only the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each name on first use
    from .base import Backend as Backend
    from .base import RunCancelled as RunCancelled
    from .base import RunObserver as RunObserver
    from .base import Snapshot as Snapshot
    from .blas_threads import one_blas_thread as one_blas_thread
    from .chunk_checks import chunk_warnings as chunk_warnings
    from .config import RawConfig as RawConfig
    from .config import ResolvedConfig as ResolvedConfig
    from .config import ServingConfig as ServingConfig
    from .config import default_layer_split as default_layer_split
    from .config import field_hints as field_hints
    from .config import parse_layer_split as parse_layer_split
    from .config import parse_value as parse_value
    from .engine_baseline import EngineDefaults as EngineDefaults
    from .engine_baseline import engine_defaults as engine_defaults
    from .errors import ConfigError as ConfigError
    from .errors import ServerError as ServerError
    from .footprint import check_footprint as check_footprint
    from .knobs import PARTS as PARTS
    from .knobs import Knob as Knob
    from .knobs import declared_knobs as declared_knobs
    from .knobs import knob_default as knob_default
    from .knobs import knob_named as knob_named
    from .knobs import setting_text as setting_text
    from .launch import ENGINES as ENGINES
    from .launch import EnvVar as EnvVar
    from .launch import ExportError as ExportError
    from .launch import Plan as Plan
    from .launch import ServingEngine as ServingEngine
    from .launch import engines_for as engines_for
    from .launch import get_engine as get_engine
    from .launch import plan_launch as plan_launch
    from .live.identity import STALL_S as STALL_S
    from .live.launcher import LOOPBACK as LOOPBACK
    from .live.launcher import LaunchError as LaunchError
    from .live.launcher import Server as Server
    from .live.launcher import ServerLaunch as ServerLaunch
    from .live.launcher import interrupted_by_signals as interrupted_by_signals
    from .live.launcher import serving as serving
    from .live.launching import check_launch as check_launch
    from .live_result import LiveSummary as LiveSummary
    from .live_result import Sample as Sample
    from .live_result import live_from_dict as live_from_dict
    from .live_result import live_to_dict as live_to_dict
    from .memory import weight_bytes_per_device as weight_bytes_per_device
    from .policies.modes import MODES as MODES
    from .profiles import hardware_names as hardware_names
    from .profiles import load_hardware as load_hardware
    from .profiles import model_names as model_names
    from .profiles.schema import PLATFORMS as PLATFORMS
    from .profiles.schema import Checkpoint as Checkpoint
    from .profiles.schema import HardwareProfile as HardwareProfile
    from .profiles.writer import profile_toml as profile_toml
    from .records import RequestRecord as RequestRecord
    from .registry import backend_entry as backend_entry
    from .registry import backend_tag as backend_tag
    from .registry import backends as backends
    from .registry import backends_reading as backends_reading
    from .registry import capabilities_of as capabilities_of
    from .registry import check_knobs_read as check_knobs_read
    from .registry import make_backend as make_backend
    from .registry import open_backend as open_backend
    from .result import TRANSFER_KINDS as TRANSFER_KINDS
    from .result import RankTime as RankTime
    from .result import RunResult as RunResult
    from .result import RunSummary as RunSummary
    from .result import Span as Span
    from .stats import percentile as percentile
    from .timeline import write_chrome_trace as write_chrome_trace
    from .tokens import format_tokens as format_tokens
    from .tokens import parse_tokens as parse_tokens

# each public name -> the module under this package that defines it (tests/test_layering.py: the same names as above)
_WHERE = {
    "Backend": "base",
    "RunCancelled": "base",
    "RunObserver": "base",
    "Snapshot": "base",
    "one_blas_thread": "blas_threads",
    "chunk_warnings": "chunk_checks",
    "RawConfig": "config",
    "ResolvedConfig": "config",
    "ServingConfig": "config",
    "default_layer_split": "config",
    "field_hints": "config",
    "parse_layer_split": "config",
    "parse_value": "config",
    "EngineDefaults": "engine_baseline",
    "engine_defaults": "engine_baseline",
    "ConfigError": "errors",
    "ServerError": "errors",
    "check_footprint": "footprint",
    "Knob": "knobs",
    "PARTS": "knobs",
    "declared_knobs": "knobs",
    "knob_default": "knobs",
    "knob_named": "knobs",
    "setting_text": "knobs",
    "ENGINES": "launch",
    "EnvVar": "launch",
    "ExportError": "launch",
    "Plan": "launch",
    "ServingEngine": "launch",
    "engines_for": "launch",
    "get_engine": "launch",
    "plan_launch": "launch",
    "STALL_S": "live.identity",
    "LOOPBACK": "live.launcher",
    "LaunchError": "live.launcher",
    "Server": "live.launcher",
    "ServerLaunch": "live.launcher",
    "interrupted_by_signals": "live.launcher",
    "serving": "live.launcher",
    "check_launch": "live.launching",
    "LiveSummary": "live_result",
    "Sample": "live_result",
    "live_from_dict": "live_result",
    "live_to_dict": "live_result",
    "weight_bytes_per_device": "memory",
    "MODES": "policies.modes",
    "hardware_names": "profiles",
    "load_hardware": "profiles",
    "model_names": "profiles",
    "Checkpoint": "profiles.schema",
    "HardwareProfile": "profiles.schema",
    "PLATFORMS": "profiles.schema",
    "profile_toml": "profiles.writer",
    "RequestRecord": "records",
    "backend_entry": "registry",
    "backend_tag": "registry",
    "backends": "registry",
    "backends_reading": "registry",
    "capabilities_of": "registry",
    "check_knobs_read": "registry",
    "make_backend": "registry",
    "open_backend": "registry",
    "RankTime": "result",
    "RunResult": "result",
    "RunSummary": "result",
    "Span": "result",
    "TRANSFER_KINDS": "result",
    "percentile": "stats",
    "write_chrome_trace": "timeline",
    "format_tokens": "tokens",
    "parse_tokens": "tokens",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
