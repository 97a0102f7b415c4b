"""The mock OpenAI-compatible streaming server (backends/live/mock_server.py) run as a program of its own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def mock_program(*flags: str) -> Iterator[str]:
    """A fresh mock server on a free loopback port, started with the program's `flags`; its URL, until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pipedeck.backends.live.mock_server", *flags], stdout=subprocess.PIPE, text=True
    )
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(10)
