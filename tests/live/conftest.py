"""Fixtures for the live tests: a real llama-server binary and the tiny model it serves.

The first run builds llama-server from the llama-cpp-python sdist (about 12 CPU-minutes;
see tests/live/llama_server.py); later runs find it cached.  Without cmake or a
C/C++ compiler the live tests skip and say why; a failed build fails them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.live.llama_server import LlamaServerError, MissingToolError, make_model, server_binary

LIVE_TESTS = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/live is a live test: `-m 'not live'` runs the fast suite without them."""
    for item in items:
        if LIVE_TESTS in item.path.parents:
            item.add_marker(pytest.mark.live)


@pytest.fixture(scope="session")
def llama_server_binary(request) -> Path:
    """The absolute path of llama-server (built once per machine, then cached)."""
    # The first build takes minutes: let its progress lines through pytest's capture.
    capman = request.config.pluginmanager.getplugin("capturemanager")
    uncaptured = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    try:
        with uncaptured:
            return server_binary()
    except MissingToolError as exc:
        pytest.skip(str(exc))
    except LlamaServerError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random-weight llama GGUF (EOS never sampled), written once per session."""
    return make_model(tmp_path_factory.mktemp("model") / "tiny-llama.gguf")
