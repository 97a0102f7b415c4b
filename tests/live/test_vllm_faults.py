"""Faults on a real vLLM: one that fails to start (a flag it refuses, a KV cache it cannot allocate), one whose
stream stalls (its engine core stopped), one killed mid-run. Each is one line at the CLI, leaves nothing of the
server running (vLLM's API server, engine core and one worker per rank: by process group and by name) and
nothing half-stored in the run store.

The stall and the kill use the session's server; the kill ends it, so it runs after every other test.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

import httpx
import psutil
import pytest

from pipedeck.store import RunStore
from tests.live import vllm_serving
from tests.live.vllm_serving import PIPEDECK, Served, names, serve_argv
from tests.paths import DATA

pytestmark = pytest.mark.vllm
MODULE = "vllm.entrypoints.openai.api_server"
ONE_RANK = ["--hardware", "cpu-host", "--tp", "1", "--pp", "1", "--chunk", "256", "--max-running", "16"]


def failed_start(argv: list[str]) -> tuple[int, str, list[psutil.Process]]:
    """Run a `pipedeck serve` that should fail: its status, its error output, and what is left of its server."""
    mark = os.urandom(8).hex()
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, vllm_serving.MARK: mark}, timeout=900
    )
    return done.returncode, done.stderr, vllm_serving.live_processes(None, mark)


def test_a_flag_vllm_refuses_is_one_line_naming_it_and_leaves_nothing(vllm_python, vllm_model, tmp_path):
    log = tmp_path / "serve.log"
    program = shlex.join([str(vllm_python), "-m", MODULE, "--no-such-option"])
    argv = serve_argv(vllm_python, vllm_model, log, "--model", str(vllm_model / "config.json"), *ONE_RANK)
    argv[argv.index("--program") + 1] = program
    status, err, left = failed_start([*argv, "--kv-capacity", "8192"])
    assert status == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("pipedeck: error: engine: vllm exited with status 2 before it was healthy; log: ")
    assert "unrecognized arguments: --no-such-option" in err
    assert not left, names(left)
    assert not (tmp_path / "serve.log.pid").exists()


def test_a_kv_cache_the_host_cannot_hold_is_one_line_naming_vllms_reason_and_leaves_nothing(
    vllm_python, vllm_model, tmp_path
):
    log = tmp_path / "serve.log"
    argv = serve_argv(vllm_python, vllm_model, log, "--model", str(vllm_model / "config.json"), *ONE_RANK)
    status, err, left = failed_start([*argv, "--kv-capacity", "100M"])  # 400 GB of KV cache on a 25 GB host
    assert status == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("pipedeck: error: engine: vllm exited with status 1 before it was healthy; log: ")
    assert "less than requested memory for kv" in err, err
    assert not left, names(left)


def served_model(served: Served) -> str:
    return httpx.get(f"{served.url}/v1/models").json()["data"][0]["id"]


def engine_core(served: Served) -> psutil.Process:
    (core,) = (p for p in served.processes() if p.name() == "VLLM::EngineCore")
    return core


def run_argv(served: Served, db, *extra: str) -> list[str]:
    """`pipedeck run` of the tiny chat scenario against the session's server, stored in `db`."""
    scenario = str(DATA / "tiny-chat.toml")
    return [
        PIPEDECK,
        "run",
        "--backend",
        "live",
        "--endpoint",
        served.url,
        "--scenario",
        scenario,
        "--db",
        str(db),
        *extra,
    ]


def test_a_stalled_stream_fails_its_requests_in_one_line_and_the_run_is_stored_whole(vllm_server, tmp_path):
    db = tmp_path / "runs.duckdb"
    core = engine_core(vllm_server)
    core.suspend()  # SIGSTOP: the API server takes the requests, the engine core computes nothing
    try:
        done = subprocess.run(
            run_argv(vllm_server, db, "--rate", "4", "--requests", "4", "--stall-timeout", "3", "--json"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        core.resume()
    assert done.returncode == 1
    assert done.stderr == "pipedeck: error: 0 of 4 requests served: 4 stalled (stored as run 1)\n"
    assert json.loads(done.stdout)["live"]["first_error"] == "stalled: no event for 3 s after 0 token events"
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
        stored = store.get_run(row.id).result
    assert (row.requests, row.failed) == (0, 4) and len(stored.live.requests) == 4
    body = {"model": served_model(vllm_server), "prompt": [100, 200], "max_tokens": 2, "ignore_eos": True}
    assert httpx.post(f"{vllm_server.url}/v1/completions", json=body, timeout=60).status_code == 200  # serves again


@pytest.mark.ends_vllm_server
def test_a_server_killed_mid_run_is_one_line_at_serve_and_at_run_and_leaves_nothing(vllm_server, tmp_path):
    db = tmp_path / "runs.duckdb"
    run = subprocess.Popen(
        run_argv(vllm_server, db, "--rate", "4", "--requests", "40"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4)  # some requests served, some streaming
    os.kill(vllm_server.pid, signal.SIGKILL)  # the API server: its engine core and workers outlive it
    _, run_err = run.communicate(timeout=120)
    _, serve_err = vllm_server.serve.communicate(timeout=60)  # serve sees its server gone and stops what is left
    assert vllm_server.serve.returncode == 1 and serve_err == (
        f"pipedeck: error: engine: vllm exited with status -9 while serving; log: {vllm_server.log}\n"
    )
    left = vllm_server.processes()
    assert not left, names(left)
    assert len(run_err.splitlines()) == 1 and " of 40 requests served: " in run_err, run_err
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
        stored = store.get_run(row.id).result
    assert len(stored.live.requests) == 40 and row.failed >= 1  # every request, served or failed: none half-stored
