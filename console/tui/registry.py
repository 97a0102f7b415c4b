"""The backends the console can run, by name: one entry today, the embedded simulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...backends.base import Backend
from ...backends.sim import SimBackend


@dataclass(frozen=True)
class BackendEntry:
    """A backend the Live view offers: its name, a one-line title, and how to make one."""

    name: str
    title: str
    make: Callable[[], Backend]


BACKENDS: dict[str, BackendEntry] = {}


def register_backend(entry: BackendEntry) -> BackendEntry:
    """Offer a backend in the Live view."""
    BACKENDS[entry.name] = entry
    return entry


register_backend(BackendEntry("sim", "simulator", SimBackend))
