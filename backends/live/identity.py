"""The live backend's name, capabilities and stall limit: what its declaration announces and its backends report.

Kept apart from backend.py so that the registry reads them without loading the HTTP stack.
"""

from __future__ import annotations

from ..base import Capabilities
from ..policies.modes import MODES

NAME = "live"
# A live server runs the config it was started with, whatever its mode (launched per config with
# `launch=ENGINE`, it restarts to change config); it keeps wall time itself, and of the knobs it reads only
# those an engine is launched with (the engine schedules as it was built to, whatever pipedeck's model says).
# It has a per-rank timeline only when its profiler is read (`profile_dir`): such a backend says so in its own
# capabilities.
CAPABILITIES = Capabilities(
    modes=tuple(MODES), timeline=False, reconfigurable=False, paced=True, endpoint=True, launch_knobs_only=True
)
STALL_S = 600.0  # a stream with no event for this long fails its request (prefill of a long prompt included)
