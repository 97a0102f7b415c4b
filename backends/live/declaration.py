"""The live backend declares itself to the backend registry (entry point `live` of the `pipedeck.backends` group).

Its factory imports the load generator (and httpx with it) only when called.
"""

from __future__ import annotations

from pathlib import Path

from ..base import Backend, BackendDeclaration
from ..errors import ConfigError
from .footprint import estimate
from .identity import CAPABILITIES, NAME
from .profiling import PROFILE_WAIT_S, Profiling


def make(
    *,
    endpoint: str | None = None,
    launch: str | None = None,
    model_path: str | None = None,
    program: str | None = None,
    health_timeout_s: float = 600.0,
    log_dir: str = "pipedeck-servers",
    profile_dir: str | None = None,
    profile_wait_s: float = PROFILE_WAIT_S,
    **load: object,
) -> Backend:
    """A server at `endpoint`, or one launched per config: `launch=ENGINE, model_path=W` (logs in `log_dir`).

    With `profile_dir`, every run is profiled by the server's profiler, which writes its traces there (a server
    at `endpoint` must have been started so; a launched one is), and waited for up to `profile_wait_s`.
    """
    from .backend import LiveBackend
    from .launching import LaunchingBackend
    from .loadgen import LoadOptions

    if endpoint and launch:
        raise ConfigError("endpoint: give either the server's URL or an engine to launch, not both")
    if not endpoint and not launch:
        raise ConfigError(
            "endpoint: the live backend needs the server's URL, e.g. http://127.0.0.1:8000, or an engine to launch"
        )
    try:
        options = LoadOptions(**load)  # type: ignore[arg-type]  # each is checked by LoadOptions itself
    except TypeError as err:
        raise ConfigError(f"backend: the live backend does not take {err}") from None
    profiling = None if profile_dir is None else Profiling(Path(profile_dir), profile_wait_s)
    if launch:
        return LaunchingBackend(
            launch,
            model_path,
            log_dir,
            program=program,
            health_timeout_s=health_timeout_s,
            options=options,
            profiling=profiling,
        )
    assert endpoint is not None
    if profiling is not None and not profiling.folder.is_dir():
        raise ConfigError(f"profile_dir: no folder {profile_dir}; give the one the server's profiler writes to")
    return LiveBackend(endpoint, options, profiling)


LIVE = BackendDeclaration(name=NAME, title="a real server", capabilities=CAPABILITIES, make=make, footprint=estimate)
