"""Shared test setup: no test writes the default run store (./pipedeck.duckdb) by accident; fixtures used in
several folders (a store path, a mock live server, the tiny model's config, a fake engine's weights)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live.llama_server import make_config
from tests.mock_program import mock_program


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


@pytest.fixture()
def db(tmp_path) -> Path:
    """Where the test's own run store goes (not created: the code under test creates it)."""
    return tmp_path / "runs.duckdb"


@pytest.fixture(scope="module")
def mock_server() -> Iterator[str]:
    """The mock OpenAI-compatible streaming server (backends/live/mock_server.py) on a free loopback port; its URL."""
    with mock_program("--token-s", "0.002") as url:
        yield url


@pytest.fixture(scope="session")
def tiny_config(tmp_path_factory) -> Path:
    """The tiny llama's Hugging Face config.json (pipedeck's --model reads it; tests/live serves that model)."""
    return make_config(tmp_path_factory.mktemp("model") / "tiny-llama.json")


@pytest.fixture()
def four_cores(monkeypatch) -> None:
    """The process may run on cores 0-3 (what vLLM's CPU build binds its ranks to), whatever this host has."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})


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
