"""The embedded discrete-event simulator: the default backend.

Its core (the cost model, decode groups, scheduler and event loop) runs
compiled with mypyc where the package was built with a C compiler, and as
plain Python otherwise, with the same results (corebuild.py). `compiled()`
tells which runs in this process and `core_status()` why.
"""

from __future__ import annotations

from pathlib import Path

from .corebuild import choose_core, load_pure_core

_COMPILED, _STATUS = choose_core(__name__, Path(__file__).parent)
if not _COMPILED:
    load_pure_core(__name__, Path(__file__).parent)


def compiled() -> bool:
    """Whether the simulator core running in this process is the mypyc-compiled one."""
    return _COMPILED


def core_status() -> str:
    """Which simulator core runs here, and why."""
    return _STATUS


from .backend import SimBackend  # noqa: E402  (imported once the core is chosen)

__all__ = ["SimBackend", "compiled", "core_status"]
