"""Backends by name: how to make each one and what it can do.

The CLI (`--backend NAME`), the tuner and the console look backends up here
and never construct one by hand, so a new backend is a new package plus one
`register_backend` call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import Backend, Capabilities
from .errors import ConfigError
from .footprint import Footprint


@dataclass(frozen=True)
class BackendEntry:
    """A backend's name, a one-line title, what it can do, how to make one, and the memory its run needs."""

    name: str
    title: str
    capabilities: Capabilities
    make: Callable[..., Backend]  # keyword options (an endpoint, say) -> a backend
    # (scenario, config or None, requests, seed, rate, timeline) -> its estimate; None: it holds nothing per request
    footprint: Callable[..., Footprint] | None = None


BACKENDS: dict[str, BackendEntry] = {}


def register_backend(entry: BackendEntry) -> BackendEntry:
    """Make a backend available by name everywhere."""
    BACKENDS[entry.name] = entry
    return entry


def backend_entry(name: str) -> BackendEntry:
    """The registered backend called `name`; a one-line ConfigError naming the choices otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"backend: unknown backend {name!r}; allowed: {', '.join(BACKENDS)}") from None


def make_backend(name: str, **options: object) -> Backend:
    """A new backend of the registered kind `name`."""
    return backend_entry(name).make(**options)


def _simulator(**options: object) -> Backend:
    from .sim import SimBackend

    if options:
        raise ConfigError(f"backend: the simulator takes no options, got {', '.join(sorted(options))}")
    return SimBackend()


def _simulator_footprint(*args: object) -> Footprint:
    from .sim.footprint import estimate

    return estimate(*args)


def _live_footprint(*args: object) -> Footprint:
    from .live.footprint import estimate

    return estimate(*args)


def _live(
    endpoint: str | None = None,
    launch: str | None = None,
    model_path: str | None = None,
    program: str | None = None,
    health_timeout_s: float = 600.0,
    log_dir: str = "pipedeck-servers",
    **load: object,
) -> Backend:
    """A server at `endpoint`, or one launched per config: `launch=ENGINE, model_path=W` (logs in `log_dir`)."""
    from .live.backend import LiveBackend
    from .live.launching import LaunchingBackend
    from .live.loadgen import LoadOptions

    if endpoint and launch:
        raise ConfigError("endpoint: give either the server's URL or an engine to launch, not both")
    if not endpoint and not launch:
        raise ConfigError(
            "endpoint: the live backend needs the server's URL, e.g. http://127.0.0.1:8000, or an engine to launch"
        )
    try:
        options = LoadOptions(**load)
    except TypeError as err:
        raise ConfigError(f"backend: the live backend does not take {err}") from None
    if launch:
        return LaunchingBackend(
            launch, model_path, log_dir, program=program, health_timeout_s=health_timeout_s, options=options
        )
    return LiveBackend(endpoint, options)


def _register_builtin() -> None:
    from .policies.modes import MODES

    register_backend(
        BackendEntry(
            "sim",
            "embedded simulator",
            Capabilities(modes=tuple(MODES), timeline=True, reconfigurable=True, paced=False),
            _simulator,
            _simulator_footprint,
        )
    )
    # A live server runs the config it was started with, whatever its mode (launched per config with
    # `launch=ENGINE`, it restarts to change config); it keeps wall time itself.
    register_backend(
        BackendEntry(
            "live",
            "a real server",
            Capabilities(modes=tuple(MODES), timeline=False, reconfigurable=False, paced=True, endpoint=True),
            _live,
            _live_footprint,
        )
    )


_register_builtin()
