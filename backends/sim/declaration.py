"""The simulator declares itself to the backend registry (entry point `sim` of the `pipedeck.backends` group)."""

from __future__ import annotations

from ..base import Backend, BackendDeclaration
from ..errors import ConfigError
from .backend import SimBackend
from .footprint import estimate


def make(**options: object) -> Backend:
    """A simulator; it takes no options."""
    if options:
        raise ConfigError(f"backend: the simulator takes no options, got {', '.join(sorted(options))}")
    return SimBackend()


SIMULATOR = BackendDeclaration(
    name=SimBackend.name,
    title="embedded simulator",
    capabilities=SimBackend.capabilities,
    make=make,
    footprint=estimate,
    shown=False,  # the default backend: its runs go untagged in listings and study names
)
