"""The vLLM tests' server: `pipedeck serve --from` the pipedeck-best.json `pipedeck export` wrote, as an operator runs it.

One server serves a whole test session (it takes minutes to start): vLLM's CPU
build at pp=2 with chunked prefill and an uneven layer split, so that the
launch carries every part of the CPU mapping (the thread binding, the KV
cache's bytes, the layer partition). Every process of a server a test starts
inherits a mark in its environment, so that a test can tell what is left of
it by name as well as by process group.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

PIPEDECK = str(Path(sys.executable).parent / "pipedeck")
LONG_PROMPTS = Path(__file__).parent / "vllm-long-prompts.toml"  # ~1800-token prompts, ~64-token answers
#: The session server's config: the tiny model on this host, two ranks of 3 and 1 layers.
CONFIG = {
    "hardware": "cpu-host",
    "tp": 1,
    "pp": 2,
    "layer_split": [3, 1],
    "chunk": 256,
    "max_running": 16,
    "kv_capacity": 8192,
}
MARK = "PIPEDECK_VLLM_TEST"  # every process of a server a test starts carries MARK=<that server's id>
SERVING = re.compile(r"serving vllm at (\S+) \(pid (\d+), log (.+)\); Ctrl-C stops it")
START_S = 600.0  # the most a start may take on a loaded 2-core machine (measured: 1.5 to 4 minutes)


@dataclass
class Served:
    """A `pipedeck serve` and the vLLM it started."""

    serve: subprocess.Popen[str]
    url: str
    pid: int  # the server's first process (vLLM's API server), which leads its process group
    log: Path
    mark: str

    def processes(self) -> list[psutil.Process]:
        """What still runs of the server: its process group's members and every process carrying its mark."""
        return live_processes(self.pid, self.mark)


def export_config(model: Path, folder: Path, **changes: object) -> Path:
    """`pipedeck export --format vllm` of CONFIG (with `changes`) for the tiny model; the folder it wrote."""
    config = folder / "config.json"
    config.write_text(json.dumps({"model": str(model / "config.json"), **CONFIG, **changes}))
    out = folder / "deploy"
    done = subprocess.run(
        [PIPEDECK, "export", "--config", str(config), "--format", "vllm", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return out


def serve_argv(python: Path, model: Path, log: Path, *options: str) -> list[str]:
    """`pipedeck serve --engine vllm` of the engine at `python` serving `model`, with `options`."""
    return [
        PIPEDECK,
        "serve",
        "--engine",
        "vllm",
        "--program",
        str(python),
        "--model-path",
        str(model),
        "--log",
        str(log),
        *options,
    ]


def start(argv: list[str]) -> Served:
    """Run `argv` (a `pipedeck serve`) until it says it serves; AssertionError with its error if it stops first."""
    mark = uuid.uuid4().hex
    serve = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, MARK: mark}
    )
    assert serve.stdout is not None
    line = serve.stdout.readline()  # blocks until serve writes it, or exits
    found = SERVING.fullmatch(line.strip())
    if found is None:
        serve.kill()
        _, err = serve.communicate()
        raise AssertionError(f"pipedeck serve did not start vLLM: {line}{err}")
    return Served(serve, found.group(1), int(found.group(2)), Path(found.group(3)), mark)


def interrupt(served: Served, timeout_s: float = 60.0) -> tuple[int, str, str]:
    """Ctrl-C the `pipedeck serve` (if it still runs); its exit status, the rest of its output and its error output."""
    if served.serve.poll() is None:
        served.serve.send_signal(signal.SIGINT)
    out, err = served.serve.communicate(timeout=timeout_s)
    return served.serve.returncode, out, err


def live_processes(pgid: int | None, mark: str) -> list[psutil.Process]:
    """The processes of group `pgid` (None: of no group in particular), and those anywhere that carry `MARK=mark`,
    whatever their names (vLLM titles its own VLLM::EngineCore, VLLM::Worker_PP0, ...); zombies aside."""
    found = []
    for process in psutil.process_iter(["status"]):
        if process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if os.getpgid(process.pid) == pgid or process.environ().get(MARK) == mark:
                found.append(process)
        except (ProcessLookupError, psutil.Error):
            continue
    return found


def names(processes: list[psutil.Process]) -> list[str]:
    """What each process is, for a failure message: its title (vLLM names its engine core and workers) or command."""
    described = []
    for process in processes:
        try:
            described.append(f"{process.pid} {' '.join(process.cmdline())[:120] or process.name()}")
        except psutil.Error:
            continue
    return described
