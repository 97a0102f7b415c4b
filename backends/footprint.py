"""How many requests a run may ask for: its backend's memory estimate, checked against the memory available.

The one guard on a run's size, called before a single request is drawn by
the CLI (`simulate`, `run`, `tune`), the console's Live view, and each
backend's own `run`. Every backend declares its estimate in its own
declaration (`BackendDeclaration.footprint`): what its run holds per request, measured
by a benchmark and counted from a sample of the workload. A run whose
estimate is more than the machine has available (`MemAvailable`) is refused
in one line with the estimate.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..scenarios import Scenario
from .registry import backend_entry

if TYPE_CHECKING:
    from .config import ResolvedConfig

SAMPLE = 1000  # requests an estimate draws to learn a workload's lengths
MEMINFO = Path("/proc/meminfo")


class FootprintError(InputError):
    """A run needs more memory than the machine has available."""


def available_bytes() -> int | None:
    """Memory the machine can still give a process (MemAvailable), or None where that cannot be read."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_footprint(
    backend: str,
    scenario: Scenario,
    config: ResolvedConfig | None,
    *,
    num_requests: int | None = None,
    seed: int = 0,
    rate: float | None = None,
    timeline: bool = True,
) -> int:
    """The number of requests the run asks for; a one-line FootprintError if `backend` would need more memory
    than is available (the workload's arguments are checked first, and nothing is drawn beyond a sample)."""
    n = scenario.check_arguments(seed, rate, num_requests)
    estimate = backend_entry(backend).footprint
    available = available_bytes()
    if estimate is None or available is None:
        return n
    needed = estimate(scenario, config, n, seed, rate, timeline)
    if needed.bytes > available:
        raise FootprintError(
            f"requests: {n} requests need about {_gb(needed.bytes)} or more {needed.basis}, more "
            f"than the {_gb(available)} available; use fewer requests"
        )
    return n


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB" if value >= 1e8 else f"{value / 1e6:.0f} MB"
