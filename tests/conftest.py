"""Shared test setup: no test writes the default run store (./pipedeck.duckdb) by accident; a mock live server."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_run_store(tmp_path_factory, monkeypatch):
    """Point $PIPEDECK_DB at a fresh file outside the test's own tmp_path and working directory."""
    monkeypatch.setenv("PIPEDECK_DB", str(tmp_path_factory.mktemp("store") / "pipedeck.duckdb"))


@pytest.fixture()
def far_from_utc(monkeypatch) -> Iterator[None]:
    """The process's local zone (and so a new DuckDB connection's TimeZone) is UTC+5:30 for the test."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(scope="module")
def mock_server() -> Iterator[str]:
    """The mock OpenAI-compatible streaming server (backends/live/mock_server.py) on a free loopback port; its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pipedeck.backends.live.mock_server", "--token-s", "0.002"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture()
def popen_log(monkeypatch) -> list[subprocess.Popen]:
    """Every process `subprocess.Popen` starts during the test, to check that none is left running."""
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def recording(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(subprocess, "Popen", recording)
    return started


@pytest.fixture()
def model(tmp_path, monkeypatch) -> Path:
    """A weights file for tests/data/fake_engine.py, which serves whatever it is given."""
    monkeypatch.setenv("FAKE_ENGINE", "serve")
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF")
    return path
