"""The one server lifecycle: start an engine with the launch `backends/launch.py` maps a config to, wait for health,
stop it.

A `ServerLaunch` says what to start (engine, weights, program, log file,
health timeout, address); `serving(launch, config)` is the block a server
lives in for `pipedeck serve`, `calibrate --launch` and the console's Live
view, and `launch.start(config)` the server the launching backend keeps
across runs. The same mapping writes `pipedeck export`'s serve.sh, so a
server started here runs exactly the flags an export hands an operator. The
server's output goes to the log file; it runs in a process group of its own
and is stopped by its PID: SIGTERM, then SIGKILL after a grace period. A pid
file beside the log lets the next launch stop a server whose pipedeck was
killed (leftovers.py); SIGTERM, and a SIGINT a shell ignored for a background
job, interrupt the block as Ctrl-C does, so the server is stopped then too.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from ..base import RunCancelled
from ..blas_threads import user_environment
from ..config import ResolvedConfig
from ..errors import ServerError
from ..launch import Launch, get_engine, plan_launch
from .client import clip
from .installed import installed_engine, program_words
from .leftovers import GRACE_S, pid_path, stop_group, stop_leftovers, write_pid_file

LOOPBACK = "127.0.0.1"
# A server pipedeck starts shares the host with pipedeck's load generator, which needs little CPU but needs it at
# once: an engine keeping every core busy (vLLM's CPU build at pp=2 on 2 cores) otherwise kept it off the CPU for
# up to 2.5 s at a time, and streams then reached it in one piece. The server runs at this niceness, in its own
# session's autogroup (Linux schedules sessions against each other first) and as processes.
SERVER_NICENESS = 10


class LaunchError(ServerError):
    """A server could not be started or did not become healthy; one line naming the cause and the log."""


@dataclass
class Server:
    """A running engine process and where to reach it."""

    engine: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    stopped: bool = False

    def stop(self, grace_s: float = GRACE_S) -> int | None:
        """SIGTERM the server's process group, SIGKILL what is left of it after `grace_s`, remove its pid file;
        returns the exit status.

        The group is stopped even when the server's first process has ended:
        the processes it started (vLLM's engine core and workers) may not
        have. Only once: a later call signals nothing (the group's number may
        since have gone to another process).
        """
        if not self.stopped:
            stop_group(self.process.pid, self._ended, grace_s)
            self.stopped = True
        pid_path(self.log_path).unlink(missing_ok=True)
        return self.process.returncode

    def _ended(self, timeout_s: float | None) -> bool:
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_command(
    config: ResolvedConfig | None,
    engine: str,
    model_path: str,
    host: str,
    port: int,
    program: tuple[str, ...] | None = None,
    *,
    profile_dir: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment additions that start `engine` serving `model_path` for `config`, its profiler
    writing to `profile_dir` when given.

    The profile's checkpoint says nothing about `model_path`: its quantization and hub are left to the model.
    Without a config the engine runs with its own defaults: only the options it always gets (`always`). The
    engine installed where `program` runs from (installed.py) decides its release and device build.
    """
    spec = get_engine(engine)
    found = installed_engine(spec, program)
    if config is None:
        build, launch = (spec.build(found.platform) if found else None), Launch(flags=spec.always)
    else:
        version, platform = (found.version, found.platform) if found else (None, None)
        plan = plan_launch(config, engine, version, weights=False, platform=platform)
        build, launch = plan.build, plan.launch
    if profile_dir is not None:
        launch += spec.profiled(profile_dir.absolute())
    argv = [*program_words(spec, build, program, found), *spec.model_words(model_path, build)]
    for flag in launch.flags:
        argv += flag.argv()
    argv += ["--host", host, "--port", str(port)]
    env = {
        var.name: var.value
        for var in launch.env
        if var.kind == "set" or (var.kind == "default" and var.name not in os.environ)
    }
    return argv, env


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def never() -> bool:
    """A `cancelled` that never asks to stop."""
    return False


@dataclass(frozen=True)
class ServerLaunch:
    """What to start: an engine loading `model_path` (by `program`, None: the engine's own), logging to `log_path`,
    healthy within `health_timeout_s`, listening at `host`:`port` (None: a free port), its profiler writing to
    `profile_dir` (None: no profiler)."""

    engine: str
    model_path: str
    log_path: Path
    program: tuple[str, ...] | None = None
    health_timeout_s: float = 600.0
    host: str = LOOPBACK
    port: int | None = None
    profile_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.profile_dir is not None:
            get_engine(self.engine).profiled(self.profile_dir)  # a one-line ConfigError for an engine without one

    def start(self, config: ResolvedConfig | None, *, cancelled: Callable[[], bool] = never) -> Server:
        """Start the engine (config None: with its own defaults) and wait until GET /health answers 200; LaunchError
        (and nothing left running) otherwise.

        `cancelled` is asked while waiting; when it says True the server is
        stopped and RunCancelled raised.
        """
        log, engine = self.log_path, self.engine
        stop_leftovers(log.absolute().parent)  # first: a leftover server may hold the port asked for
        port = self.port or free_port(self.host)
        argv, env = server_command(
            config, engine, self.model_path, self.host, port, self.program, profile_dir=self.profile_dir
        )
        if shutil.which(argv[0]) is None:  # before the log is opened: an earlier log is not emptied for nothing
            raise LaunchError(f"engine: {argv[0]!r} not found; install {engine} or give its program")
        if self.profile_dir is not None:
            try:
                self.profile_dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise LaunchError(f"profile_dir: cannot create {self.profile_dir}: {err.strerror or err}") from None
        created = not log.exists()
        try:
            with log.open("wb") as out:
                process = subprocess.Popen(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**user_environment(), **env},
                    start_new_session=True,
                )
        except OSError as err:
            if created:  # no engine ran: no output to keep
                log.unlink(missing_ok=True)
            raise LaunchError(f"log: cannot start {engine} logging to {log}: {err.strerror or err}") from None
        yield_cpu(process.pid)
        server = Server(engine, f"http://{self.host}:{port}", process, log)
        try:
            write_pid_file(log, engine, process.pid, argv)
        except OSError as err:
            server.stop(grace_s=2.0)
            raise LaunchError(f"log: cannot write {pid_path(log)}: {err.strerror or err}") from None
        try:
            wait_healthy(server, self.health_timeout_s, cancelled)
        except BaseException:
            server.stop(grace_s=2.0)
            raise
        return server


def yield_cpu(pid: int) -> None:
    """Lower the started server's priority below the load generator's: its session's autogroup (where the kernel
    has them) and the process, whose children (vLLM's engine core and workers) inherit it. Best effort: a host
    that allows neither leaves the server as it is."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(f"{SERVER_NICENESS}\n")
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + SERVER_NICENESS))


@contextlib.contextmanager
def serving(
    launch: ServerLaunch, config: ResolvedConfig | None, *, cancelled: Callable[[], bool] = never
) -> Iterator[Server]:
    """The server `launch` starts for `config`, healthy, for the block; stopped however the block ends."""
    with interrupted_by_signals(), launch.start(config, cancelled=cancelled) as server:
        yield server


class Terminated(KeyboardInterrupt):
    """SIGTERM, or a SIGINT a shell would have ignored for a background job, interrupts as Ctrl-C does."""


@contextlib.contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise `Terminated` in the main thread while the block runs (elsewhere: nothing changes).

    Without this, `kill PID` (or `timeout`) would end pipedeck at once and
    leave a server it launched running, in the session of its own it has.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, _terminate)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def wait_healthy(server: Server, timeout_s: float, cancelled: Callable[[], bool] = lambda: False) -> None:
    """Poll /health until it answers 200; LaunchError if the process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            if cancelled():
                raise RunCancelled(f"stopped while waiting for {server.engine} to become healthy")
            status = server.process.poll()
            if status is not None:
                raise LaunchError(
                    f"engine: {server.engine} exited with status {status} before it was healthy; "
                    f"log: {server.log_path}{start_failure(server.log_path)}"
                )
            try:
                if client.get(f"{server.url}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"health: {server.engine} at {server.url} was not healthy within {timeout_s:g} s; "
                    f"log: {server.log_path}{start_failure(server.log_path)}"
                )
            time.sleep(0.05)


def last_log_line(path: Path) -> str:
    """' (last line: ...)' naming the log's last non-blank line, or '' when it has none."""
    lines = _log_lines(path)
    return f" (last line: {clip(lines[-1], 160)})" if lines else ""


# A Python exception as a traceback or a logger writes it: `ValueError: ...`, `pkg.mod.EngineDeadError: ...`, at the
# start of a line or after a logger's prefix (vLLM's `(Worker pid=7) ERROR 12-07 17:46:09 [file.py:1] `).
_EXCEPTION = re.compile(r"(?:^|\s)((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): .*)")


def start_failure(path: Path) -> str:
    """Why a server that never got healthy stopped, as its log says: ' (error: ...)' naming the first exception the
    log shows (the root cause, which an engine's later lines only point back to), else its last line."""
    for line in _log_lines(path):
        found = _EXCEPTION.search(line)
        if found:
            return f" (error: {clip(found.group(1), 160)})"
    return last_log_line(path)


def _log_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if line.strip()] if path.exists() else []
