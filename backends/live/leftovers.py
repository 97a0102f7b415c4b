"""Pid files of launched servers, and stopping a server whose pipedeck was killed.

A launched server runs in a session of its own, so a `kill -9` of the
pipedeck that started it (no handler runs) leaves it serving. Each launch
writes `<log>.pid` beside the server's log: the engine, the server's PID,
the launching pipedeck's PID, both processes' start times (so a reused PID
is never mistaken for them) and the command. The next launch that writes
its log in the same folder stops every server whose pipedeck is gone:
SIGTERM to its process group, SIGKILL to what is left of the group after a
grace period (an engine's own processes may outlive the first), and says so in
one line; when it cannot, the line says how (the PID and command). A server
stopped by its own pipedeck removes its pid file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict, cast

import psutil

SUFFIX = ".pid"  # appended to the log's name: pipedeck-serve.log.pid
GRACE_S = 10.0


class PidRecord(TypedDict):
    """What a pid file holds (JSON): the server and the pipedeck that launched it, each with its start time."""

    engine: str
    server_pid: int
    server_started: float
    pipedeck_pid: int
    pipedeck_started: float
    command: list[str]
    log: str


log = logging.getLogger("pipedeck.launch")


def pid_path(log_path: Path) -> Path:
    """Where the pid file of the server logging to `log_path` lives."""
    return log_path.with_name(log_path.name + SUFFIX)


def write_pid_file(log_path: Path, engine: str, pid: int, command: list[str]) -> Path:
    """Record the server `pid` this process launched, beside its log; returns the file's path."""
    record: PidRecord = {
        "engine": engine,
        "server_pid": pid,
        "server_started": _started(pid),
        "pipedeck_pid": os.getpid(),
        "pipedeck_started": _started(os.getpid()),
        "command": command,
        "log": str(log_path),
    }
    path = pid_path(log_path)
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    return path


def stop_group(pid: int, ended: Callable[[float | None], bool], grace_s: float = GRACE_S) -> bool:
    """SIGTERM the process group `pid` leads, SIGKILL what is left of it after `grace_s`.

    The whole group, not only its leader: an engine's other processes (vLLM's
    engine core and one worker per rank) may outlive the API server that
    started them, which may have ended already. `ended(timeout)` waits for the
    leader (and reaps it, when it is this process's child). Returns whether
    the leader and the rest of its group ended.
    """
    deadline = time.monotonic() + grace_s
    _signal_group(pid, signal.SIGTERM)
    if ended(grace_s) and _group_ended(pid, deadline):
        return True
    _signal_group(pid, signal.SIGKILL)
    return ended(None) and _group_ended(pid, time.monotonic() + 5.0)


def group_members(pgid: int) -> list[psutil.Process]:
    """The processes of process group `pgid` that still run (zombies aside)."""
    found = []
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def _group_ended(pgid: int, deadline: float) -> bool:
    """Whether every process of group `pgid` has ended by `deadline`."""
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_leftovers(folder: Path) -> None:
    """Stop each server a pid file in `folder` names whose pipedeck is gone; one log line for each."""
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        record = _read(path)
        if record is None or _same(record["pipedeck_pid"], record["pipedeck_started"]):
            continue  # not a pipedeck pid file, or its pipedeck still runs and will stop its server itself
        server = _same(record["server_pid"], record["server_started"])
        if server is not None:
            where = (
                f"{record['engine']} (pid {record['server_pid']}) left running by pipedeck "
                f"(pid {record['pipedeck_pid']}), which is gone"
            )
            try:
                stopped = stop_group(server.pid, lambda timeout: _ended(server, timeout))  # noqa: B023 - called before the loop moves on
                why = "it still runs after SIGKILL"
            except (PermissionError, psutil.AccessDenied) as err:
                stopped, why = False, str(err)
            if not stopped:
                log.warning(
                    f"{where}, could not be stopped ({why}); stop it with `kill -TERM -- -{server.pid}` "
                    f"(command: {shlex.join(record['command'])})"
                )
                continue
            log.warning(f"stopped {where}; its log: {record['log']}")
        path.unlink(missing_ok=True)


def _read(path: Path) -> PidRecord | None:
    """A pid file's record, or None when the file is not one pipedeck wrote."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(record, dict) or not all(key in record for key in PidRecord.__annotations__):
        return None
    return cast(PidRecord, record)  # every key is there; `_same` refuses pids and times that are not numbers


def _started(pid: int) -> float:
    return psutil.Process(pid).create_time()


def _same(pid: int, started: float) -> psutil.Process | None:
    """The running process `pid` if it is the one started at `started` (not a zombie, not a reused PID).

    Both come from a pid file, which a person may have edited: text that is not a number is no process.
    """
    try:
        process = psutil.Process(int(pid))
        if abs(process.create_time() - float(started)) < 0.01 and process.status() != psutil.STATUS_ZOMBIE:
            return process
    except (psutil.Error, TypeError, ValueError):
        pass
    return None


def _ended(process: psutil.Process, timeout_s: float | None) -> bool:
    """Whether `process` (not this one's child: its parent reaps it) ends within `timeout_s` (None: 5 s)."""
    deadline = time.monotonic() + (5.0 if timeout_s is None else timeout_s)
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
