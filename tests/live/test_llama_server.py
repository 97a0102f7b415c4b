"""A real llama-server streams exactly the tokens asked for, and stops cleanly.

Starts llama-server (tests/live/llama_server.py builds it once per machine) on a free
loopback port with the tiny model, streams one completion from a token-id prompt and
counts what comes back, then stops the server by its PID.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.live.llama_server import PIECE_IDS

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; always reaps ``proc``."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def running_server(binary: Path, model: Path, log: Path, *extra: str) -> Iterator[str]:
    """Start llama-server on a free loopback port; yield its base URL once /health is OK."""
    port = free_port()
    cmd = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics",
        "--parallel",
        "4",
        "-c",
        "4096",
        "--threads",
        "1",
        *extra,
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server not ready in {READY_TIMEOUT_S} s:\n{log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield base
    finally:
        stop(proc)


def stream_completion(base: str, body: dict) -> tuple[list[dict], bool]:
    """POST a streaming /v1/completions; return its JSON events and whether ``[DONE]`` ended it."""
    events: list[dict] = []
    done = False
    with httpx.stream("POST", f"{base}/v1/completions", json={**body, "stream": True}, timeout=30.0) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            assert not done, "an event after [DONE]"
            data = line[len("data: ") :]
            if data == "[DONE]":
                done = True
            else:
                events.append(json.loads(data))
    return events, done


@pytest.mark.parametrize("ignore_eos", [True, False])
def test_streams_exactly_max_tokens(llama_server_binary, tiny_model, tmp_path, ignore_eos):
    prompt = list(PIECE_IDS[:16])
    with running_server(llama_server_binary, tiny_model, tmp_path / "server.log") as base:
        events, done = stream_completion(
            base, {"prompt": prompt, "max_tokens": 32, "ignore_eos": ignore_eos, "seed": 1}
        )
    assert done
    texts = [c["text"] for e in events for c in e.get("choices", []) if c.get("text")]
    finish = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
    # One event per generated token (the model only samples whole ASCII word pieces),
    # and the model never samples EOS, so the length holds with or without ignore_eos.
    assert len(texts) == 32
    assert finish == ["length"]
    usage = [e["usage"] for e in events if e.get("usage")]
    if usage:
        assert usage[-1]["completion_tokens"] == 32
        assert usage[-1]["prompt_tokens"] == len(prompt)
