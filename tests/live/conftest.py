"""Fixtures for the live tests: a real llama-server binary and the tiny model it serves; vLLM's CPU build, its tiny
model, and the one vLLM server a session's vLLM tests share.

The first run builds llama-server from the llama-cpp-python sdist (about 12 CPU-minutes;
see tests/live/llama_server.py); later runs find it cached.  Without cmake or a
C/C++ compiler the live tests skip and say why; a failed build fails them.  vLLM's CPU
build is installed on first use into an environment of its own (about 1.5 minutes;
tests/live/vllm_server.py); where it cannot be installed or run the vLLM tests skip and
say why, and a vLLM server that fails to start fails them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live import vllm_serving
from tests.live.llama_server import LlamaServerError, MissingToolError, make_model, server_binary
from tests.live.vllm_server import EngineUnavailable, engine_python
from tests.live.vllm_server import make_model as make_vllm_model

LIVE_TESTS = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/live is a live test: `-m 'not live'` runs the fast suite without them. A test that
    ends the session's vLLM server runs after every other."""
    for item in items:
        if LIVE_TESTS in item.path.parents:
            item.add_marker(pytest.mark.live)
    items.sort(key=lambda item: item.get_closest_marker("ends_vllm_server") is not None)  # stable: the rest keep order


def uncaptured(request: pytest.FixtureRequest) -> contextlib.AbstractContextManager[None]:
    """Let a first build's or install's progress lines through pytest's capture (they take minutes)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    return capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()


@pytest.fixture(scope="session")
def llama_server_binary(request) -> Path:
    """The absolute path of llama-server (built once per machine, then cached)."""
    try:
        with uncaptured(request):
            return server_binary()
    except MissingToolError as exc:
        pytest.skip(str(exc))
    except LlamaServerError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random-weight llama GGUF (EOS never sampled), written once per session."""
    return make_model(tmp_path_factory.mktemp("model") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def vllm_python(request) -> Path:
    """The Python of vLLM's CPU build (installed once per machine, then cached); the vLLM tests skip without it."""
    try:
        with uncaptured(request):
            return engine_python()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory, vllm_python) -> Path:
    """The tiny random-weight Llama vLLM serves (Hugging Face layout): the one $PIPEDECK_VLLM_MODEL names (.ci/run
    makes it before the tests), else one written for the session."""
    made = os.environ.get("PIPEDECK_VLLM_MODEL")
    if made:
        return Path(made).absolute()
    return make_vllm_model(tmp_path_factory.mktemp("vllm-model") / "tiny-llama")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, vllm_python, vllm_model) -> Iterator[vllm_serving.Served]:
    """The session's vLLM: `pipedeck serve --from` the pipedeck-best.json `pipedeck export` wrote for
    vllm_serving.CONFIG. Stopped with Ctrl-C at the end of the session, which must leave nothing running."""
    folder = tmp_path_factory.mktemp("vllm-serve")
    best = vllm_serving.export_config(vllm_model, folder) / "pipedeck-best.json"
    served = vllm_serving.start(
        vllm_serving.serve_argv(vllm_python, vllm_model, folder / "serve.log", "--from", str(best))
    )
    yield served
    status, _, err = vllm_serving.interrupt(served)
    assert status in (0, 1), err  # 1: a test ended the server, and serve said so
    left = served.processes()
    assert not left, f"left running: {vllm_serving.names(left)}"
