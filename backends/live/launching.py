"""A live backend that starts the engine with each config it is asked to run, so a tuner can measure many configs.

A server runs one config (the flags `backends/launch.py` maps it to), so
measuring another config means another server. `LaunchingBackend` keeps at
most one server: `run` starts one for the config it is given, reuses it while
the config stays the same (the rates of one goodput search), and stops it and
starts a fresh one when the config changes. `close()` stops it; so does
dropping the backend and leaving the interpreter, so nothing is left running.
A server that will not start, fails its health check or dies while serving is
a `LaunchError`, one line naming the log: it fails that run, and the next
one gets a fresh server.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import time
import weakref
from dataclasses import replace
from pathlib import Path

from ...scenarios import Scenario
from ..base import RunObserver
from ..config import ResolvedConfig, ServingConfig
from ..errors import ConfigError
from ..launch import ENGINES, ExportError, is_hub_id
from ..result import RunResult
from .backend import LiveBackend
from .identity import CAPABILITIES, NAME
from .launcher import LaunchError, Server, ServerLaunch, last_log_line, never
from .loadgen import LoadOptions, ServerUnreachable
from .profiling import Profiling

_STARTS = itertools.count(1)  # numbers this process's server logs apart, whichever backend started them


def check_launch(engine: str, model_path: str | None, program: str | None) -> tuple[str, ...] | None:
    """Refuse, before any work, a launch that cannot start; returns the program's words (None: the engine's own).

    One-line ConfigErrors name the field: `launch` (the engine), `model_path`, `program`.
    """
    if engine not in ENGINES:
        raise ConfigError(f"launch: unknown engine {engine!r}; allowed: {', '.join(ENGINES)}")
    spec = ENGINES[engine]
    if not model_path:
        raise ConfigError(f"model_path: give the weights {engine} loads (a path or hub id)")
    if spec.model_file and not Path(model_path).is_file() and not (spec.hub_flag and is_hub_id(model_path)):
        hub = " or a hub id org/name[:quant]" if spec.hub_flag else ""
        raise ConfigError(f"model_path: {engine} loads a local GGUF file{hub}; there is no file {model_path}")
    words = tuple(shlex.split(program)) if program else None
    if program is not None and not words:
        raise ConfigError("program: empty; give the engine's launcher command")
    first = (words or spec.program)[0]
    if shutil.which(first) is None:
        if words:
            raise ConfigError(f"program: {first!r} not found (not an executable file, nor on PATH)")
        raise ConfigError(f"launch: {first!r} not found on PATH; install {engine} or give its program")
    return words


class _Running:
    """The server a LaunchingBackend holds, if any, and the config it serves; shared with its finalizer."""

    def __init__(self) -> None:
        self.server: Server | None = None
        self.config: dict[str, object] | None = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and forget it."""
        server, self.server, self.config = self.server, None, None
        if server is not None:
            server.stop()


class LaunchingBackend:
    """Runs each scenario on a server it launched with that run's config (the `live` backend with `launch=`)."""

    name = NAME

    def __init__(
        self,
        engine: str,
        model_path: str | None,
        log_dir: str | os.PathLike[str],
        *,
        program: str | None = None,
        health_timeout_s: float = 600.0,
        options: LoadOptions = LoadOptions(),
        profiling: Profiling | None = None,
    ):
        self.program = check_launch(engine, model_path, program)
        if profiling is not None:
            ENGINES[engine].profiled(profiling.folder)  # a one-line ConfigError, before any server starts
        if not (isinstance(health_timeout_s, int | float) and health_timeout_s > 0):
            raise ConfigError(f"health_timeout_s: a positive number of seconds, got {health_timeout_s!r}")
        self.engine, self.model_path, self.log_dir = engine, str(model_path), Path(log_dir)  # given: checked above
        self.health_timeout_s, self.options, self.profiling = float(health_timeout_s), options, profiling
        self.capabilities = replace(CAPABILITIES, timeline=profiling is not None)
        self.starts = 0  # servers this backend started
        self._running = _Running()
        weakref.finalize(self, self._running.stop)  # when dropped, and at interpreter exit

    @property
    def server(self) -> Server | None:
        """The server running now, if any."""
        return self._running.server

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig | ResolvedConfig,
        rate: float | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        observer: RunObserver | None = None,
        timeline: bool = True,
    ) -> RunResult:
        """Replay `scenario` against a server running `config`; LaunchError if that server fails."""
        server = self._server_for(config.resolve(), observer)
        try:
            result = LiveBackend(server.url, self.options, self.profiling).run(
                scenario, config, rate=rate, seed=seed, num_requests=num_requests, observer=observer, timeline=timeline
            )
        except ServerUnreachable:
            self._check_alive(server)
            raise
        self._check_alive(server)
        return result

    def check(self) -> None:
        """A one-line ConfigError unless the engine's program (and the weights it loads) can still be found."""
        check_launch(self.engine, self.model_path, None if self.program is None else shlex.join(self.program))

    def close(self) -> None:
        """Stop the server, if one runs; a later `run` starts a fresh one."""
        self._running.stop()

    def __enter__(self) -> LaunchingBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _server_for(self, config: ResolvedConfig, observer: RunObserver | None) -> Server:
        """The running server if it serves `config`, else a fresh one (the old one stopped first)."""
        running, wanted = self._running, config.to_dict()
        if running.server is not None:
            self._check_alive(running.server)
            if running.config == wanted:
                return running.server
            running.stop()
        self.starts += 1
        log = self.log_dir / f"{self.engine}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{next(_STARTS)}.log"
        launch = ServerLaunch(
            self.engine,
            self.model_path,
            log,
            program=self.program,
            health_timeout_s=self.health_timeout_s,
            profile_dir=None if self.profiling is None else self.profiling.folder,
        )
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            running.server = launch.start(config, cancelled=observer.should_stop if observer else never)
        except ExportError as err:  # a config this engine cannot run
            raise LaunchError(str(err)) from None
        except OSError as err:
            raise LaunchError(f"log: cannot write {log}: {err.strerror or err}") from None
        running.config = wanted
        return running.server

    def _check_alive(self, server: Server) -> None:
        """LaunchError (the server stopped and forgotten) if it exited while it should be serving."""
        status = server.process.poll()
        if status is None:
            return
        self._running.stop()
        raise LaunchError(
            f"engine: {self.engine} exited with status {status} while serving; "
            f"log: {server.log_path}{last_log_line(server.log_path)}"
        )
