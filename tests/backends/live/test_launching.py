"""The launching live backend on a fake engine: a server per config, restarted only when the config changes, never left running.

The fake engine (tests/data/fake_engine.py with FAKE_ENGINE=serve) takes any
engine's flags, answers /health and streams completions as the mock server
does; tests/live/test_tune_live.py runs against a real llama-server.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from pathlib import Path

import pytest

from pipedeck.backends import ConfigError, LaunchError, ServingConfig, check_launch, make_backend
from pipedeck.backends.live.launching import LaunchingBackend
from pipedeck.scenarios import load_scenario
from tests.paths import DATA

FAKE = f"{sys.executable} {DATA / 'fake_engine.py'}"
TINY = str(DATA / "tiny-chat.toml")
CPU = dict(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=1, pp=1, chunk=512, max_running=4, kv_capacity=4096)


def launching(model: Path, tmp_path: Path) -> LaunchingBackend:
    backend = make_backend(
        "live",
        launch="llama-server",
        model_path=str(model),
        program=FAKE,
        log_dir=str(tmp_path / "logs"),
        health_timeout_s=20,
    )
    assert isinstance(backend, LaunchingBackend)
    return backend


def test_the_launching_backend_restarts_the_server_only_when_the_config_changes(model, tmp_path):
    backend, scenario = launching(model, tmp_path), load_scenario(TINY)
    backend.run(scenario, ServingConfig.of(**CPU), rate=50, num_requests=4)
    first = backend.server.process
    backend.run(scenario, ServingConfig.of(**CPU), rate=100, num_requests=4)  # another rate, the same server
    assert backend.server.process is first and backend.starts == 1
    result = backend.run(scenario, ServingConfig.of(**{**CPU, "chunk": 1024}), rate=50, num_requests=4)
    assert backend.starts == 2 and first.poll() is not None
    assert len(result.records) == 4 and result.backend == "live" and result.config["chunk"] == 1024
    logs = sorted((tmp_path / "logs").glob("*.log"))
    assert len(logs) == 2 and "--batch-size 1024" in logs[1].read_text()
    assert [p.name for p in (tmp_path / "logs").glob("*.pid")] == [logs[1].name + ".pid"]  # the running server's
    second = backend.server.process
    backend.close()
    assert second.poll() is not None and backend.server is None
    assert not list((tmp_path / "logs").glob("*.pid"))


def test_a_server_that_died_fails_the_run_with_one_line_and_the_next_run_gets_a_fresh_one(model, tmp_path):
    backend, scenario = launching(model, tmp_path), load_scenario(TINY)
    backend.run(scenario, ServingConfig.of(**CPU), rate=50, num_requests=4)
    os.kill(backend.server.process.pid, signal.SIGKILL)
    backend.server.process.wait(5)
    with pytest.raises(LaunchError, match=r"^engine: llama-server exited with status -9 while serving; log: \S+\.log"):
        backend.run(scenario, ServingConfig.of(**CPU), rate=50, num_requests=4)
    assert backend.server is None
    assert len(backend.run(scenario, ServingConfig.of(**CPU), rate=50, num_requests=4).records) == 4
    assert backend.starts == 2
    backend.close()


def test_a_dropped_backend_stops_its_server(model, tmp_path):
    backend = launching(model, tmp_path)
    backend.run(load_scenario(TINY), ServingConfig.of(**CPU), rate=50, num_requests=2)
    process = backend.server.process
    del backend
    gc.collect()
    assert process.wait(5) is not None


def test_a_config_the_engine_cannot_run_is_a_launch_error(model, tmp_path):
    with pytest.raises(LaunchError, match=r"^tp: llama-server runs one process"):
        launching(model, tmp_path).run(
            load_scenario(TINY), ServingConfig.of(**{**CPU, "tp": 2}), rate=50, num_requests=2
        )


@pytest.mark.parametrize(
    "engine, weights, program, message",
    [
        (
            "nope",
            "model",
            FAKE,
            "launch: unknown engine 'nope'; allowed: vllm-ascend, vllm, sglang, llama-server, fastpp",
        ),
        ("llama-server", None, FAKE, "model_path: give the weights llama-server loads (a path or hub id)"),
        (
            "llama-server",
            "/nope.gguf",
            FAKE,
            "model_path: llama-server loads a local GGUF file or a hub id org/name[:quant]; there is no file /nope.gguf",
        ),
        (
            "llama-server",
            "a/b/c",
            FAKE,
            "model_path: llama-server loads a local GGUF file or a hub id org/name[:quant]; there is no file a/b/c",
        ),
        ("llama-server", "model", "/nope/x", "program: '/nope/x' not found (not an executable file, nor on PATH)"),
        (
            "llama-server",
            "model",
            None,
            "launch: 'llama-server' not found on PATH; install llama-server or give its program",
        ),
    ],
)
def test_a_launch_is_checked_before_any_work(model, monkeypatch, engine, weights, program, message):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(ConfigError) as err:
        check_launch(engine, str(model) if weights == "model" else weights, program)
    assert str(err.value) == message


def test_a_hub_id_passes_the_launch_check_without_a_local_file(monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert check_launch("llama-server", "ggml-org/Qwen2.5-0.5B-Instruct-GGUF:Q8_0", FAKE)[0] == sys.executable


def test_the_live_backend_takes_an_endpoint_or_an_engine_to_launch():
    with pytest.raises(ConfigError, match=r"^endpoint: give either the server's URL or an engine to launch, not both$"):
        make_backend("live", endpoint="http://127.0.0.1:1", launch="llama-server")
    with pytest.raises(ConfigError, match=r"^endpoint: the live backend needs the server's URL"):
        make_backend("live")
