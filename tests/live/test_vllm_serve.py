"""`pipedeck serve --engine vllm` on this CPU host: vLLM's CPU build at pp=2, started from the pipedeck-best.json
`pipedeck export` wrote, runs exactly what the export's serve.sh runs and holds the config's KV cache and split.

The session's one server (tests/live/conftest.py, `vllm_server`) is what these tests look at; the command the
export's serve.sh would start is recorded by a stand-in `python` on PATH, which writes down its arguments and its
environment instead of serving.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipedeck.backends.launch import VLLM_CPU_BINDING, thread_binding
from tests.live.vllm_serving import CONFIG

pytestmark = pytest.mark.vllm
LAUNCH_ENV = (VLLM_CPU_BINDING, "VLLM_PP_LAYER_PARTITION")


def export_started(deploy: Path, model: Path, folder: Path, *arguments: str) -> tuple[list[str], dict[str, str]]:
    """The arguments and environment the export's serve.sh (given `arguments`) starts the engine's Python with."""
    bin_dir, record = folder / "bin", folder / "started.json"
    bin_dir.mkdir()
    recorder = bin_dir / "python"
    recorder.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump({{'argv': sys.argv, 'env': dict(os.environ)}}, open({str(record)!r}, 'w'))\n"
    )
    recorder.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "MODEL": str(model)}
    env.pop(VLLM_CPU_BINDING, None)
    subprocess.run(["bash", str(deploy / "serve.sh"), *arguments], env=env, check=True)
    started = json.loads(record.read_text())
    return started["argv"], started["env"]


def test_serve_from_the_export_starts_exactly_the_command_and_environment_of_its_serve_sh(
    vllm_server, vllm_python, vllm_model, tmp_path
):
    server = psutil.Process(vllm_server.pid)
    argv, env = server.cmdline(), server.environ()
    address = urlsplit(vllm_server.url)
    deploy = vllm_server.log.parent / "deploy"
    exported, exported_env = export_started(
        deploy, vllm_model, tmp_path, "--host", str(address.hostname), "--port", str(address.port)
    )
    assert argv[0] == str(vllm_python)  # the engine's own environment; serve.sh runs the `python` on PATH
    assert argv[1:] == exported[1:]
    assert argv[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", str(vllm_model)]
    assert {name: env.get(name) for name in LAUNCH_ENV} == {name: exported_env.get(name) for name in LAUNCH_ENV}
    assert env[VLLM_CPU_BINDING] == thread_binding(2) and env["VLLM_PP_LAYER_PARTITION"] == "3,1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # it would override --kv-cache-memory-bytes
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(8192 * 1024 * 3)  # 1 KiB a token, 3 layers


def test_the_server_holds_the_configs_kv_capacity_and_runs_an_engine_core_and_a_worker_per_rank(vllm_server):
    page = httpx.get(f"{vllm_server.url}/metrics").text
    (info,) = (s for f in text_string_to_metric_families(page) for s in f.samples if s.name == "vllm:cache_config_info")
    assert int(info.labels["num_gpu_blocks"]) * int(info.labels["block_size"]) == CONFIG["kv_capacity"]
    titles = sorted(p.name() for p in vllm_server.processes() if p.name().startswith("VLLM::"))
    assert titles == ["VLLM::EngineCore", "VLLM::Worker_PP0", "VLLM::Worker_PP1"]
    assert os.getpgid(vllm_server.pid) == vllm_server.pid  # the API server leads the group they all belong to
