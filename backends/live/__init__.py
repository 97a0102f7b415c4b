"""Live backends: drive a real OpenAI-compatible server (vLLM, vLLM-Ascend, SGLang, llama-server) and read its metrics.

The names below load on first use, so that the backend registry can read
this package's declaration (declaration.py) without importing httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .loadgen import LoadOptions, ServerUnreachable, replay, run_result, run_scenario
    from .metrics import parse, poll

_HOMES = {
    "LoadOptions": "loadgen",
    "ServerUnreachable": "loadgen",
    "replay": "loadgen",
    "run_result": "loadgen",
    "run_scenario": "loadgen",
    "parse": "metrics",
    "poll": "metrics",
}

__all__ = [
    "LoadOptions",
    "ServerUnreachable",
    "parse",
    "poll",
    "replay",
    "run_result",
    "run_scenario",
]


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
